"""`kill -9` at every publish point of a stage run, before and after the rename: the rerun converges.

A clean run is counted first (every `atomic.publish`: files, links, manifests, listings, refs).
Then, for each point k and each side of the rename, a forked child stages with a publish that
SIGKILLs its own process at the k-th call — no finally blocks, no atexit, like a power cut of the
process. After each kill: no final name holds a partial or foreign file, and a rerun converges to
exactly the clean run's tree (same paths, same bytes, same link texts). Bytes lost = bytes of the
clean tree missing or different after the rerun, measured (tally.lost_bytes) after every kill
before anything is asserted; partial bytes = bytes under a final name right after the kill that
differ from the clean run's. Both must be 0.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from sparkfleet.base import atomic
from sparkfleet.demo.hubfixture import DRAFTER_REPO, WEIGHTS_REPO, build_nas_hub
from sparkfleet.stage import execute
from sparkfleet.stage.plan import StageRequest

from .tally import count, lost_bytes, partial_bytes

# make test's xdist: with the other modules that launch lanes on this machine (their ports), one worker
pytestmark = [pytest.mark.timeout(900), pytest.mark.xdist_group("local_lanes")]


def requests(nas: Path, local: Path) -> list[StageRequest]:
    return [
        StageRequest(nas, local, WEIGHTS_REPO, "main", exclude=("page15/*",)),
        StageRequest(nas, local, DRAFTER_REPO, "main"),
    ]


def tree(root: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == root and ".locks" in dirnames:
            dirnames.remove(".locks")
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            rel = str(p.relative_to(root))
            out[rel] = (
                ("-> " + os.readlink(p)) if p.is_symlink() else (p.read_bytes() if p.is_file() else "dir")
            )
    return out


def packs(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.glob("*.bin")}


def staged_with_kill(nas: Path, local: Path, point: int, after_rename: bool) -> int:
    """Fork; the child stages and SIGKILLs itself at publish number `point`. Returns its wait status."""
    pid = os.fork()
    if pid == 0:  # child
        try:
            calls = 0
            real_replace = os.replace

            def publish(tmp: Path, final: Path) -> None:
                nonlocal calls
                calls += 1
                if calls == point and not after_rename:
                    os.kill(os.getpid(), signal.SIGKILL)
                real_replace(tmp, final)
                if calls == point and after_rename:
                    os.kill(os.getpid(), signal.SIGKILL)  # renamed, directory not yet fsynced
                atomic.fsync_dir(final.parent)

            atomic.publish = publish
            execute.stage(requests(nas, local), jobs=1)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return status


@pytest.mark.surface("file:hub tree")
def test_kill_9_at_every_publish_point_converges(tmp_path, figures):
    nas = build_nas_hub(tmp_path / "nas" / "hub", shard_bytes=16 * 1024)
    clean = tmp_path / "clean"
    counted = []
    real_publish = atomic.publish
    try:
        atomic.publish = lambda tmp, final: (counted.append(final), real_publish(tmp, final))[-1]
        assert execute.stage(requests(nas.root, clean), jobs=1).ok
    finally:
        atomic.publish = real_publish
    reference = tree(clean)
    points = len(counted)
    assert points >= 20, points  # files, links, listings, manifests and refs
    for point in range(1, points + 1):
        for after in (False, True):
            local = tmp_path / f"k{point}{'a' if after else 'b'}"
            status = staged_with_kill(nas.root, local, point, after)
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
            count(figures, "stage-kill9", "faults_injected")  # the child was killed: a real fault
            # what a reader sees right after the kill: every final file against its source
            partial = partial_bytes(figures, "stage-kill9", reference, tree(local))
            rerun = execute.stage(requests(nas.root, local), jobs=1)
            after_rerun = tree(local)
            lost = lost_bytes(figures, "stage-kill9", reference, after_rerun)
            assert partial == 0, f"kill at {point}: partial bytes under a final name"
            assert rerun.ok and lost == 0, f"kill at {point}: {lost} bytes lost after the rerun"
            assert after_rerun == reference, f"kill at {point} ({'after' if after else 'before'} rename)"
            count(figures, "stage-kill9", "reruns_converged")


@pytest.mark.surface("file:engram pack")
def test_kill_9_at_every_publish_point_of_an_engram_pack_converges(tmp_path, figures):
    """The same sweep over `engram pack`: packs, the journal after each, the receipt last."""
    from sparkfleet.demo.fleet import DEMO_LANE, write_demo_fleet
    from sparkfleet.engram import pack as engram_pack
    from sparkfleet.engram.verify import verify
    from sparkfleet.fleet import inventory

    fleet = write_demo_fleet(tmp_path / "demo", shard_bytes=16 * 1024)
    inv = inventory.load(fleet.root)
    out = engram_pack.plan(inv, DEMO_LANE, "dgx1").placement.out_dir
    counted = []
    real_publish = atomic.publish
    try:
        atomic.publish = lambda tmp, final: (counted.append(final), real_publish(tmp, final))[-1]
        engram_pack.pack(inv, DEMO_LANE, "dgx1")
    finally:
        atomic.publish = real_publish
    clean = packs(out)
    assert clean and len(counted) >= 4, counted
    for point in range(1, len(counted) + 1):
        for after in (False, True):
            for p in out.iterdir():
                if p.is_file():
                    p.unlink()
            pid = os.fork()
            if pid == 0:
                try:
                    calls = 0

                    def publish(tmp: Path, final: Path, point=point, after=after) -> None:
                        nonlocal calls
                        calls += 1
                        if calls == point and not after:
                            os.kill(os.getpid(), signal.SIGKILL)
                        os.replace(tmp, final)
                        if calls == point and after:
                            os.kill(os.getpid(), signal.SIGKILL)
                        atomic.fsync_dir(final.parent)

                    atomic.publish = publish
                    engram_pack.pack(inv, DEMO_LANE, "dgx1")
                finally:
                    os._exit(0)
            _, status = os.waitpid(pid, 0)
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
            count(figures, "engram-kill9", "faults_injected")
            # a final pack name is complete or absent: every pack against the clean run's
            partial = partial_bytes(figures, "engram-kill9", clean, packs(out))
            engram_pack.pack(inv, DEMO_LANE, "dgx1")
            lost = lost_bytes(figures, "engram-kill9", clean, packs(out))
            assert partial == 0, f"kill at {point}: a pack under its final name is partial"
            assert lost == 0 and packs(out) == clean, f"kill at {point}: {lost} bytes lost"
            assert verify(inv, DEMO_LANE, "dgx1", full=True).ok
            count(figures, "engram-kill9", "reruns_converged")
