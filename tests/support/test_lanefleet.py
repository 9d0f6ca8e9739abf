"""The one test fleet: what lanefleet writes is what the inventory reads, and nothing else writes it."""

from __future__ import annotations

import os
import re
from pathlib import Path

from sparkfleet.fleet import inventory
from support.fleetnet import NetnsHost
from support.lanefleet import MODELS, SSH_ANY_HOST, lane_recipe, netns_fields, use_ssh, write_fleet

TESTS = Path(__file__).resolve().parents[1]


def test_the_fleet_written_is_the_fleet_read(tmp_path: Path) -> None:
    hosts = {
        "a": {"address": "10.0.0.1", "ssh_port": 2222, "ulimits": {"memlock": 8192},
              "local_hub": tmp_path / "a"},  # fmt: skip
        "b": {"address": "b.lan", "fabric_ip": "10.1.0.2"},
    }
    extra = '\n[pins.tiny]\nkind = "hf"\nrepo = "org/tiny"\nrevision = "main"\n'
    root = write_fleet(
        tmp_path / "fleet",
        hosts,
        {"two": lane_recipe(["a", "b"], MODELS)},
        extra,
        defaults={"ssh_user": "ops", "local_hub": "/srv/hub", "nas_hub": "/mnt/nas/hub", "reserve_gib": 0},
    )
    inv = inventory.load(root)
    a, b = inv.hosts["a"], inv.hosts["b"]
    assert (a.address, a.ssh_port, a.ssh_user, a.local_hub) == ("10.0.0.1", 2222, "ops", tmp_path / "a")
    assert (b.address, b.fabric_ip) == ("b.lan", "10.1.0.2")
    assert (b.local_hub, b.nas_hub) == (Path("/srv/hub"), Path("/mnt/nas/hub"))
    assert a.reserve_bytes == 0
    assert {"weights", "drafter", "lane-image", "short-image", "tiny"} <= set(inv.pins)
    assert list(inv.lanes["two"].hosts) == ["a", "b"]


def test_netns_glue_names_every_field_and_points_sparkfleet_at_the_config(tmp_path, monkeypatch) -> None:
    h = NetnsHost(name="dgx1", netns="ns", addr="10.9.0.2", port=22, root=tmp_path / "dgx1",
                  key=tmp_path / "key", veth="v")  # fmt: skip
    fields = netns_fields(h, tmp_path / "nas", state_dir="/elsewhere")
    assert fields == {
        "address": "10.9.0.2", "ssh_user": "root", "ssh_port": 22, "ssh_key": str(tmp_path / "key"),
        "local_hub": str(tmp_path / "dgx1" / "nvme" / "hub"), "nas_hub": str(tmp_path / "nas"),
        "state_dir": "/elsewhere",
    }  # fmt: skip
    monkeypatch.setenv("SPARKFLEET_HOST", "dgx9")
    by_fields = use_ssh(monkeypatch, tmp_path / "any" / "ssh_config")
    assert by_fields.read_text() == SSH_ANY_HOST
    by_name = use_ssh(monkeypatch, tmp_path / "named", [h], remote="env X=1 sparkfleet")
    assert "Host dgx1\n    HostName 10.9.0.2\n" in by_name.read_text()
    assert os.environ["SPARKFLEET_SSH_CONFIG"] == str(by_name)
    assert os.environ["SPARKFLEET_REMOTE"] == "env X=1 sparkfleet" and "SPARKFLEET_HOST" not in os.environ


FORMER_WRITERS = ("support/launch_fleet.py", "engram/engram_helpers.py", "bench/bench_fleet.py",
                  "nix/test_fleet_lib.py", "support/stagefleet.py")  # fmt: skip
GLUE = {
    "the any-host ssh_config": re.compile(re.escape('"Host *\\n  StrictHostKeyChecking no')),
    "SPARKFLEET_REMOTE set to this python": re.compile(r'setenv\("SPARKFLEET_REMOTE", f"\{sys\.executable\}'),
    "a netns host's address/port/key fields": re.compile(r'"ssh_port": h(ost)?\.port'),
}


def test_no_test_module_copies_the_fleet_writer_or_the_netns_glue() -> None:
    """The five fleet writers write through the factory; the netns glue is nowhere else."""
    writes = re.compile(r'"fleet\.toml"\)\.write_text\(')
    assert [w for w in FORMER_WRITERS if writes.search((TESTS / w).read_text())] == []
    copies = sorted(
        (what, str(p.relative_to(TESTS)))
        for p in TESTS.rglob("*.py")
        if p.name not in ("lanefleet.py", "test_lanefleet.py")
        for what, pattern in GLUE.items()
        if pattern.search(p.read_text())
    )
    assert copies == []
