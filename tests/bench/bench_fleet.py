"""A throwaway fleet root for CLI tests (imported by name: tests/bench is on sys.path)."""

from __future__ import annotations

from support.lanefleet import write_fleet

PINS = {
    "weights": {"kind": "hf", "repo": "org/model", "revision": "a" * 40},
    "image": {"kind": "oci", "image": "example/serve", "digest": "sha256:" + "b" * 64},
}


def write_fleet_root(
    root,
    port: int,
    *,
    smoke: str = "",
    bench: str = "",
    local_hub: str = "/tmp/hub",
    nas_hub: str = "/tmp/nas",
) -> str:
    """A minimal fleet root whose one lane, `fake-lane`, has its head on 127.0.0.1:<port>."""
    recipe = (
        '[lane]\nhosts = ["head", "worker"]\n'
        '[[models]]\npin = "weights"\n'
        f'[launch]\nimage = "image"\nport = {port}\ncommand = ["serve"]\n' + smoke + bench
    )
    write_fleet(
        root,
        {"head": {"address": "127.0.0.1"}, "worker": {"address": "127.0.0.2"}},
        {"fake-lane": recipe},
        defaults={"ssh_user": "tester", "local_hub": local_hub, "nas_hub": nas_hub},
        pins=PINS,
    )
    (root / "recipes" / "fake-lane" / "reports").mkdir(parents=True, exist_ok=True)
    return "fake-lane"
