"""A throwaway fleet root for CLI tests (imported by name: tests/bench is on sys.path)."""

from __future__ import annotations


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
    (root / "hosts").mkdir(parents=True, exist_ok=True)
    (root / "hosts" / "fleet.toml").write_text(
        "schema_version = 1\n"
        f'[defaults]\nssh_user = "tester"\nlocal_hub = "{local_hub}"\nnas_hub = "{nas_hub}"\n'
        '[hosts.head]\naddress = "127.0.0.1"\n'
        '[hosts.worker]\naddress = "127.0.0.2"\n'
        '[pins.weights]\nkind = "hf"\nrepo = "org/model"\nrevision = "' + "a" * 40 + '"\n'
        '[pins.image]\nkind = "oci"\nimage = "example/serve"\ndigest = "sha256:' + "b" * 64 + '"\n'
    )
    lane = root / "recipes" / "fake-lane"
    (lane / "reports").mkdir(parents=True, exist_ok=True)
    (lane / "recipe.toml").write_text(
        '[lane]\nhosts = ["head", "worker"]\n'
        '[[models]]\npin = "weights"\n'
        f'[launch]\nimage = "image"\nport = {port}\ncommand = ["serve"]\n' + smoke + bench
    )
    return "fake-lane"
