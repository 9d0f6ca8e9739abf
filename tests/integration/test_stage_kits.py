"""`stage` over real ssh brings each lane's pinned kit checkout to its hosts.

Two netns hosts, each with its own sshd, NVMe dir and state_dir; the lane binds a kit tree
([[launch.trees]]) from a git pin whose url is a real git repository made here (CI has no
network). `stage --lane` runs `stage HOST --here --events` on every host over ssh: each host's
checkout appears at <state_dir>/kits/<pin>/<rev>/ at the pinned HEAD with the kit's files, a rerun
leaves it alone, a checkout changed on the host is replaced, and a rev the repository lacks is
refused naming the host, pin, url and rev, with nothing left behind. `verify --lane` (on each host)
reports the changed checkout with its fix and exits 1 before `stage` replaces it, and so does
`doctor LANE` (each host's agent asks verify's question).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sparkfleet.base.errors import ExitCode
from sparkfleet.demo.hubfixture import build_nas_hub
from support.kitrepo import FILES, SERVING, git, make_kit_repo, trees_toml
from support.lanefleet import lane_recipe, use_ssh, write_fleet
from support.stagefleet import STAGE_MODELS, STAGE_PINS

pytestmark = [pytest.mark.netns, pytest.mark.slow]

HOSTS = ["dgx1", "dgx2"]
LANE = "kitlane"


def _write(tmp_path: Path, hosts, kit_path: Path, rev: str) -> Path:
    fields = {
        h: {"address": h, "local_hub": hosts[h].nvme / "hub", "nas_hub": tmp_path / "nas" / "hub",
            "state_dir": hosts[h].root / "state"}
        for h in HOSTS
    }  # fmt: skip
    pins = {**STAGE_PINS, "kit": {"kind": "git", "repo": "example/kit", "rev": rev, "url": str(kit_path)}}
    recipe = lane_recipe(HOSTS, STAGE_MODELS, trees_toml("kit"))
    defaults = {"ssh_user": "root", "reserve_gib": 0}
    return write_fleet(tmp_path / "fleet", fields, {LANE: recipe}, defaults=defaults, pins=pins)


@pytest.fixture
def fleet(tmp_path, fleet_hosts, monkeypatch):
    build_nas_hub(tmp_path / "nas" / "hub", shard_bytes=64 * 1024)
    kit = make_kit_repo(tmp_path / "kit-repo")
    hosts = fleet_hosts(HOSTS)
    use_ssh(monkeypatch, tmp_path / "ssh_config", hosts)
    return {"root": _write(tmp_path, hosts, kit.path, kit.rev), "hosts": hosts, "kit": kit, "tmp": tmp_path}


def cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "sparkfleet", "--root", str(root), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240)


def checkout(fleet, host: str, rev: str | None = None) -> Path:
    return fleet["hosts"][host].root / "state" / "kits" / "kit" / (rev or fleet["kit"].rev)


def test_stage_brings_the_lanes_kit_checkout_to_every_host(fleet):
    kit = fleet["kit"]
    dry = cli(fleet["root"], "stage", "--lane", LANE, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    planned = json.loads(dry.stdout)["kits"]
    assert {h: [(k["state"], k["path"]) for k in planned[h]] for h in HOSTS} == {
        h: [("fetch", str(checkout(fleet, h)))] for h in HOSTS
    }
    assert not checkout(fleet, "dgx1").exists()

    proc = cli(fleet["root"], "stage", "--lane", LANE, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads(proc.stdout)
    for outcome in record["hosts"]:
        (done,) = outcome["run"]["kits"]
        assert (done["state"], done["head"], done["url"]) == ("fetched", kit.rev, str(kit.path))
    for h in HOSTS:
        final = checkout(fleet, h)
        assert git(final, "rev-parse", "HEAD") == kit.rev
        assert git(final, "status", "--porcelain") == ""
        for rel, data in FILES.items():
            assert (final / rel).read_bytes() == data, (h, rel)

    again = cli(fleet["root"], "stage", "dgx1", "--lane", LANE)  # human output names it
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"kit kit example/kit@{kit.rev[:10]} at {checkout(fleet, 'dgx1')}: present, left alone" in (
        again.stdout
    )

    served = checkout(fleet, "dgx2") / SERVING / "serve.py"
    served.write_text("# edited on dgx2\n")
    checked = cli(fleet["root"], "verify", "--lane", LANE, "--json")  # on each host, over ssh
    assert checked.returncode == 1, checked.stdout + checked.stderr
    reports = {h["host"]: h["report"] for h in json.loads(checked.stdout)["hosts"]}
    assert reports["dgx1"]["ok"] and [k["ok"] for k in reports["dgx1"]["kits"]] == [True]
    (bad,) = reports["dgx2"]["kits"]
    assert not reports["dgx2"]["ok"] and bad["why"].startswith("changed in place (1 paths")
    assert bad["fix"].startswith(f"sparkfleet stage dgx2 --lane {LANE} (clones {kit.path} at {kit.rev}")
    assert served.read_text() == "# edited on dgx2\n"  # verify changed nothing there
    doctor = cli(fleet["root"], "doctor", LANE, "--json")  # the same verdict, from each host's agent
    assert doctor.returncode == ExitCode.REFUSED, doctor.stdout + doctor.stderr  # launch refuses it
    kits = {c["host"]: c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "kit checkout"}
    assert kits["dgx1"]["ok"] and kits["dgx1"]["detail"].endswith(": at the pinned rev, clean, complete")
    assert kits["dgx2"]["detail"].endswith(f": {bad['why']}") and kits["dgx2"]["hint"] == bad["fix"]
    fixed = cli(fleet["root"], "stage", "dgx2", "--json")  # every lane of the host
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    ((outcome,),) = [json.loads(fixed.stdout)["hosts"]]
    (done,) = outcome["run"]["kits"]
    assert done["state"] == "replaced" and "changed in place" in done["why"]
    assert served.read_bytes() == FILES[f"{SERVING}/serve.py"]
    assert (Path(done["kept"]) / SERVING / "serve.py").read_text() == "# edited on dgx2\n"


def test_a_rev_the_repository_lacks_is_refused_and_nothing_is_left(fleet):
    bad = "0123456789abcdef"
    root = _write(fleet["tmp"], fleet["hosts"], fleet["kit"].path, bad)
    proc = cli(root, "stage", "dgx1", "--lane", LANE)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 5, out
    assert f"dgx1: kit pin kit (example/kit@{bad}) from {fleet['kit'].path}: no such commit there" in out
    kits = fleet["hosts"]["dgx1"].root / "state" / "kits"
    assert sorted(p.name for p in kits.iterdir()) == [".locks"]
    assert not (fleet["hosts"]["dgx1"].nvme / "hub").exists() or not any(
        (fleet["hosts"]["dgx1"].nvme / "hub").glob("models--*")
    )  # the models were not staged either: kits go first, a refusal stops the run


def test_a_fanout_stages_the_kit_once_per_host_in_its_second_wave(fleet):
    proc = cli(fleet["root"], "stage", "--lane", LANE, "--fanout", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads(proc.stdout)
    assert record["fanout"]
    for outcome in record["hosts"]:  # wave 2's records: wave 1 (a share from the NAS) fetched none
        (done,) = outcome["run"]["kits"]
        assert (done["state"], done["head"]) == ("fetched", fleet["kit"].rev), outcome["host"]
    for h in HOSTS:
        assert git(checkout(fleet, h), "rev-parse", "HEAD") == fleet["kit"].rev
