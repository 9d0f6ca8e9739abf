"""Disk faults on real, small tmpfs mounts: full at every level, out of inodes, read-only.

For a sweep of free-space levels (the tmpfs filled up to leave N bytes, before or after the
preflight) and inode limits, staging either succeeds or refuses with the right exit code; never a
traceback, never a partial file under a final name; once the fault is gone the rerun converges to
the clean tree. A read-only destination is refused with exit 2 before anything is written.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest

from sparkfleet.demo.hubfixture import WEIGHTS_REPO, build_nas_hub
from sparkfleet.errors import ExitCode, SparkfleetError
from sparkfleet.stage import execute
from sparkfleet.stage.plan import StageRequest

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


def _check_no_partials(local: Path, reference: dict) -> None:
    if local.exists():
        for rel, content in tree(local).items():
            assert ".sf-tmp-" not in rel, rel
            assert reference.get(rel) in (content, None) or content == "dir", f"{rel} is partial"


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
    figures["faults_injected"] += 1
    try:
        execute.stage(request(nas, local), jobs=1)
        figures["space_runs_fit"] += 1
    except SparkfleetError as exc:
        assert exc.exit_code == ExitCode.SPACE, exc
        figures["space_faults_refused"] += 1
    _check_no_partials(local, reference)
    monkeypatch.undo()
    if filler is not None:
        filler.unlink(missing_ok=True)
    assert execute.stage(request(nas, local)).ok
    assert tree(local) == reference
    figures["reruns_converged"] += 1


@pytest.mark.parametrize("nr_inodes", [4, 12, 20, 28, 36, 200])
def test_inode_limits(nas, reference, tmpfs, figures, nr_inodes):
    mount = tmpfs(32 * MIB, options=f"nr_inodes={nr_inodes}")
    local = mount / "hub"
    figures["faults_injected"] += 1
    try:
        execute.stage(request(nas, local), jobs=1)
        assert tree(local) == reference
    except SparkfleetError as exc:
        assert exc.exit_code == ExitCode.SPACE, exc
        figures["space_faults_refused"] += 1
        _check_no_partials(local, reference)


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
    figures["faults_injected"] += 1
    with pytest.raises(SparkfleetError) as exc:
        execute.stage(request(nas, local), jobs=1)
    assert exc.value.exit_code == ExitCode.SPACE
    _check_no_partials(local, reference)
    monkeypatch.undo()
    subprocess.run(["rm", "-rf", str(hogs)], check=True)
    assert execute.stage(request(nas, local)).ok and tree(local) == reference
    figures["reruns_converged"] += 1


@pytest.mark.parametrize("staged_first", [False, True])
def test_read_only_destination(nas, reference, tmpfs, figures, staged_first):
    mount = tmpfs(16 * MIB)
    local = mount / "hub"
    if staged_first:
        assert execute.stage(request(nas, local)).ok
        (local / "models--demo-org--DeepSeek-V4.1-Flash-EXL3-3bpw" / "refs" / "main").unlink()
    before = tree(local) if local.exists() else {}
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
    figures["faults_injected"] += 1
    with pytest.raises(SparkfleetError, match="read-only") as exc:
        execute.stage(request(nas, local))
    assert exc.value.exit_code == ExitCode.USAGE
    assert (tree(local) if local.exists() else {}) == before
    figures["space_faults_refused"] += 1
