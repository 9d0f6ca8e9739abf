"""`sparkfleet demo --workdir DIR` on a directory the demo never wrote: nothing stopped, written, removed.

The demo stops the lanes a previous demo left running in its workdir (by their records) and rebuilds
the fleet there; `--fresh` empties it. Each of those is only for a workdir that carries the demo's
marker, checked without following a link. Attacked here as a careless operator would: `--workdir`
at a fleet of their own with a rank serving, and at a directory whose `nas` (or whose marker) is a
link into another demo's folder. The oracle is the test's own: it built each directory, so it knows
that none of them is the demo's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sparkfleet.base import procs
from sparkfleet.demo.fleet import DEMO_LANE, DEMO_MARKER, write_demo_fleet
from sparkfleet.fleet import inventory
from sparkfleet.launch import lane as lanes
from support.lanefleet import serve_demo_lane

from .tally import bad_input, lost_bytes

# the lane this module launches serves on this machine's ports, as tests/demo/test_demo_rerun.py's do
pytestmark = [pytest.mark.xdist_group("local_lanes"), pytest.mark.timeout(600)]

SURFACE = "demo-workdir"


def _demo(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparkfleet", "demo", "--workdir", str(workdir), "--shard-mib", "1", *args],
        capture_output=True, text=True, timeout=300, env={**os.environ, "TERM": "dumb"},
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _files(root: Path) -> dict[str, bytes | str]:
    """Every entry under `root`, links not followed: path -> bytes, link text, or "dir"."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = "link:" + os.readlink(path)
            elif path.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = path.read_bytes()
    return out


def _refused(proc: subprocess.CompletedProcess, workdir: Path) -> bool:
    """A clean refusal: exit 2, DIR named, how to proceed said, no traceback."""
    return (
        proc.returncode == 2
        and f"{workdir} was not written by `sparkfleet demo`" in proc.stderr
        and "nothing was stopped, written or removed" in proc.stderr
        and "give `--workdir` a new or empty directory" in proc.stderr
        and "Traceback" not in proc.stdout + proc.stderr
    )


@pytest.mark.surface("cli:demo --workdir")
def test_a_hand_made_fleet_with_a_serving_rank_is_left_alone(tmp_path, figures):
    """A fleet of the operator's own in DIR (not written by the demo), its lane serving: `demo
    --workdir DIR` stopped its rank and replaced its hosts/fleet.toml with the demo's."""
    src = write_demo_fleet(tmp_path / "built-elsewhere", shard_bytes=16 * 1024)
    workdir = tmp_path / "my-fleet"
    shutil.copytree(src.root, workdir / "fleet")
    fleet_toml = workdir / "fleet" / "hosts" / "fleet.toml"
    fleet_toml.write_text("# my own fleet, edited by hand\n" + fleet_toml.read_text())
    inv = inventory.load(workdir / "fleet")
    try:
        pids = serve_demo_lane(inv)
        before = _files(workdir)
        proc = _demo(workdir)
        refused = _refused(proc, workdir)
        bad_input(figures, SURFACE, refused)
        assert refused, proc.stdout + proc.stderr
        assert "stopped the previous demo" not in proc.stdout
        assert all(procs.group_members(p) for p in pids), "the operator's ranks were stopped"
        assert lanes.status(inv, DEMO_LANE).running == 2
        assert lost_bytes(figures, SURFACE, before, _files(workdir)) == 0
        assert not (workdir / DEMO_MARKER).exists()
    finally:
        lanes.stop(inventory.load(workdir / "fleet"), DEMO_LANE, 5)


@pytest.mark.surface("cli:demo --workdir", "cli:demo --fresh")
@pytest.mark.parametrize("link", ["nas", DEMO_MARKER])
def test_a_link_into_another_demos_folder_lends_it_no_marker(tmp_path, figures, link):
    """DIR/nas (or DIR/.sparkfleet-demo) a link into another demo's folder: the marker check
    followed it, and `--fresh` went on to empty DIR and rebuild there."""
    other = tmp_path / "other-demo"
    write_demo_fleet(other, shard_bytes=16 * 1024)
    workdir = tmp_path / "dir"
    workdir.mkdir()
    (workdir / "notes.txt").write_bytes(b"the operator's, not the demo's\n")
    (workdir / link).symlink_to(other / link)
    if link == "nas":  # the marker an older demo wrote in its nas/, reached through the link
        (other / "nas" / DEMO_MARKER).write_bytes(b"written by sparkfleet demo\n")
    before_other, before_dir = _files(other), _files(workdir)
    proc = _demo(workdir, "--fresh")
    refused = _refused(proc, workdir)
    bad_input(figures, SURFACE, refused)
    assert refused, proc.stdout + proc.stderr
    assert lost_bytes(figures, SURFACE, before_other, _files(other)) == 0
    assert lost_bytes(figures, SURFACE, before_dir, _files(workdir)) == 0


@pytest.mark.surface("cli:demo --workdir")
def test_a_workdir_that_is_a_link_is_refused(tmp_path, figures):
    other = tmp_path / "other-demo"
    write_demo_fleet(other, shard_bytes=16 * 1024)
    workdir = tmp_path / "dir"
    workdir.symlink_to(other)
    before = _files(other)
    proc = _demo(workdir, "--fresh")
    refused = proc.returncode == 2 and f"--workdir {workdir} is a link" in proc.stderr
    bad_input(figures, SURFACE, refused)
    assert refused, proc.stdout + proc.stderr
    assert lost_bytes(figures, SURFACE, before, _files(other)) == 0
