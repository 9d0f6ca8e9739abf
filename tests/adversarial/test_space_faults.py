"""Disk faults on real, small tmpfs mounts: full at every level, out of inodes, read-only.

For a sweep of free-space levels (the tmpfs filled up to leave N bytes, before or after the
preflight) and inode limits, staging either succeeds or refuses with the right exit code; never a
traceback, never a partial file under a final name; once the fault is gone the rerun converges to
the clean tree. A read-only destination is refused with exit 2 before anything is written.

A fault is counted only when the run actually failed (a level the run fits is counted apart), and
after every fault every final file is compared with its source: right after it (partial bytes)
and after the rerun (lost bytes) — see tally.py.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest

from sparkfleet.base.errors import ExitCode, SparkfleetError
from sparkfleet.demo.hubfixture import WEIGHTS_REPO, build_nas_hub
from sparkfleet.stage import execute
from sparkfleet.stage.plan import StageRequest

from .tally import count, lost_bytes, partial_bytes
from .test_kill9_sweep import tree

pytestmark = pytest.mark.timeout(600)
MIB = 1024 * 1024


def request(nas: Path, local: Path) -> list[StageRequest]:
    return [StageRequest(nas, local, WEIGHTS_REPO, "main")]


def fill(mount: Path, leave: int) -> Path:
    """Fill `mount` until about `leave` bytes are free; returns the filler to delete later."""
    filler = mount / "filler"
    st = os.statvfs(mount)
    size = max(0, st.f_bavail * st.f_frsize - leave)
    with open(filler, "wb") as fh, contextlib.suppress(OSError):
        fh.write(b"\0" * size)
    return filler


@pytest.fixture(scope="module")
def nas(tmp_path_factory) -> Path:
    return build_nas_hub(tmp_path_factory.mktemp("nas") / "hub", shard_bytes=256 * 1024).root


@pytest.fixture(scope="module")
def reference(nas, tmp_path_factory) -> dict:
    local = tmp_path_factory.mktemp("clean") / "hub"
    assert execute.stage(request(nas, local)).ok
    return tree(local)


def _check_no_partials(local: Path, reference: dict, figures) -> None:
    final = tree(local) if local.exists() else {}
    partial = partial_bytes(figures, "space", reference, final)
    assert not [rel for rel in final if ".sf-tmp-" in rel], "a temp was left behind"
    assert partial == 0, f"{partial} bytes under final names differ from the source"


def _rerun_converges(nas: Path, local: Path, reference: dict, figures) -> None:
    run = execute.stage(request(nas, local))
    final = tree(local)
    lost = lost_bytes(figures, "space", reference, final)
    assert run.ok and lost == 0 and final == reference, f"{lost} bytes lost after the rerun"
    count(figures, "space", "reruns_converged")


@pytest.mark.surface("file:hub tree", "cli:stage --reserve-gib")
@pytest.mark.parametrize("when", ["before-preflight", "after-preflight"])
@pytest.mark.parametrize("leave_kib", [0, 64, 256, 700, 1500, 2600])
def test_disk_full_at_every_level(nas, reference, tmpfs, monkeypatch, figures, when, leave_kib):
    mount = tmpfs(8 * MIB)
    local = mount / "hub"
    filler = None
    if when == "before-preflight":
        filler = fill(mount, leave_kib * 1024)
    else:
        real = execute.preflight

        def late(*args, **kw):
            nonlocal filler
            free = real(*args, **kw)
            filler = fill(mount, leave_kib * 1024)
            return free

        monkeypatch.setattr(execute, "preflight", late)
    try:
        execute.stage(request(nas, local), jobs=1)
        count(figures, "space", "runs_that_fit")  # nothing failed: not a fault
        assert tree(local) == reference
    except SparkfleetError as exc:
        count(figures, "space", "faults_injected")
        assert exc.exit_code == ExitCode.SPACE, exc
        count(figures, "space", "faults_refused")
        _check_no_partials(local, reference, figures)
    monkeypatch.undo()
    if filler is not None:
        filler.unlink(missing_ok=True)
    _rerun_converges(nas, local, reference, figures)


@pytest.mark.surface("file:hub tree")
@pytest.mark.parametrize("nr_inodes", [4, 12, 20, 28, 36, 200])
def test_inode_limits(nas, reference, tmpfs, figures, nr_inodes):
    mount = tmpfs(32 * MIB, options=f"nr_inodes={nr_inodes}")
    local = mount / "hub"
    try:
        execute.stage(request(nas, local), jobs=1)
        count(figures, "space", "runs_that_fit")  # enough inodes: not a fault
        assert tree(local) == reference
    except SparkfleetError as exc:
        count(figures, "space", "faults_injected")
        assert exc.exit_code == ExitCode.SPACE, exc
        count(figures, "space", "faults_refused")
        _check_no_partials(local, reference, figures)
        # the fault gone (more inodes on the same mount), the rerun must converge: nothing lost
        subprocess.run(["mount", "-o", "remount,nr_inodes=100000", str(mount)], check=True)
        _rerun_converges(nas, local, reference, figures)


@pytest.mark.surface("file:hub tree")
def test_inodes_running_out_mid_run(nas, reference, tmpfs, monkeypatch, figures):
    mount = tmpfs(32 * MIB, options="nr_inodes=200")
    local = mount / "hub"
    hogs = mount / "hogs"
    real = execute.preflight

    def late(*args, **kw):
        free = real(*args, **kw)
        hogs.mkdir()
        with contextlib.suppress(OSError):
            for i in range(10_000):
                (hogs / str(i)).touch()
        return free

    monkeypatch.setattr(execute, "preflight", late)
    with pytest.raises(SparkfleetError) as exc:
        execute.stage(request(nas, local), jobs=1)
    count(figures, "space", "faults_injected")
    assert exc.value.exit_code == ExitCode.SPACE
    count(figures, "space", "faults_refused")
    _check_no_partials(local, reference, figures)
    monkeypatch.undo()
    subprocess.run(["rm", "-rf", str(hogs)], check=True)
    _rerun_converges(nas, local, reference, figures)


@pytest.mark.surface("file:hub tree")
@pytest.mark.parametrize("staged_first", [False, True])
def test_read_only_destination(nas, reference, tmpfs, figures, staged_first):
    mount = tmpfs(16 * MIB)
    local = mount / "hub"
    if staged_first:
        assert execute.stage(request(nas, local)).ok
        (local / "models--demo-org--DeepSeek-V4.1-Flash-EXL3-3bpw" / "refs" / "main").unlink()
    before = tree(local) if local.exists() else {}
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
    with pytest.raises(SparkfleetError, match="read-only") as exc:
        execute.stage(request(nas, local))
    count(figures, "space", "faults_injected")
    assert exc.value.exit_code == ExitCode.USAGE
    count(figures, "space", "faults_refused")
    after = tree(local) if local.exists() else {}
    # nothing that was there before the refusal may be lost or changed
    assert lost_bytes(figures, "space", before, after) == 0 and after == before
