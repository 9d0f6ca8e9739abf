"""Issue 10 items 3, 5–7: hostile names, planted links, swapped files and OS faults during staging.

Each test reproduces what an attacker or a careless operator did, and checks that the stager
refuses with a SparkfleetError (the right exit code, no traceback) and changes nothing.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from stage_helpers import weights_request

from sparkfleet.base.errors import ExitCode, SourceError
from sparkfleet.cli import main
from sparkfleet.demo.hubfixture import WEIGHTS_REPO
from sparkfleet.facts.hubcache import parse_repo_spec
from sparkfleet.stage import execute
from sparkfleet.stage.plan import StageRequest


@pytest.mark.parametrize("revision", ["../../../../outside", "main/../../../x", ".hidden", "main\n", "a..b"])
def test_revision_with_dotdot_never_reads_or_writes_outside(nas, local, tmp_path, revision):
    """Item 3: a `..` revision read refs/ outside the NAS root and wrote refs/ outside the hub."""
    commit = nas.weights.commits["main"]
    # a file outside the NAS root that looks like a ref: reading it would pass as a valid commit
    planted = Path(
        os.path.normpath(nas.root / f"models--{WEIGHTS_REPO.replace('/', '--')}" / "refs" / revision)
    )
    if ".." in revision and not revision.startswith("a"):
        planted.parent.mkdir(parents=True, exist_ok=True)
        planted.write_text(commit)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(SourceError, match="not a git ref name or a commit"):
        execute.stage([StageRequest(nas.root, local, WEIGHTS_REPO, revision)])
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    with pytest.raises(SourceError):
        parse_repo_spec(f"{WEIGHTS_REPO}@{revision}")


def test_repo_spec_with_dotdot_refused_by_the_cli(nas, local):
    out = CliRunner().invoke(
        main,
        ["stage", "--source", str(nas.root), "--dest", str(local), "--repo", f"{WEIGHTS_REPO}@../../../x"],
    )
    assert out.exit_code == ExitCode.USAGE, out.output
    assert "not a git ref name" in out.output and "Traceback" not in out.output
    assert not local.exists()


def test_every_write_path_is_asserted_under_the_destination(tmp_path):
    dest = tmp_path / "hub"
    assert execute.inside(dest, dest / "models--a--b" / "refs" / "main")
    for bad in (dest / ".." / "x", dest / "models--a--b" / ".." / ".." / "y", dest):
        with pytest.raises(Exception, match="outside the destination hub"):
            execute.inside(dest, bad)


def test_staging_a_good_revision_still_works(nas, local):
    run = execute.stage([weights_request(nas, local)])
    assert run.ok


# ---- item 5: the stage lock ----------------------------------------------------------------


def _plant(local: Path, how: str, victim: Path) -> Path:
    locks = local / ".locks"
    lock = locks / "sparkfleet-stage.lock"
    if how == "dir-link":
        local.mkdir(parents=True)
        victim.parent.mkdir(parents=True, exist_ok=True)
        locks.symlink_to(victim.parent, target_is_directory=True)
        victim.with_name("sparkfleet-stage.lock").write_bytes(b"precious")
        return victim.with_name("sparkfleet-stage.lock")
    locks.mkdir(parents=True)
    if how == "file-link":
        lock.symlink_to(victim)
    elif how == "fifo":
        os.mkfifo(lock)
    elif how == "not-ours":
        lock.write_bytes(b"")
        os.chown(lock, 65534, 65534)
    return victim


@pytest.mark.parametrize("how", ["file-link", "dir-link", "fifo", "not-ours"])
def test_planted_lock_is_refused_and_nothing_is_truncated(nas, local, tmp_path, how):
    """Item 5: the lock followed a planted symlink (the target truncated, a PID written into it)."""
    if how == "not-ours" and os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    victim = tmp_path / "victim" / "weights.bin"
    victim.parent.mkdir(parents=True)
    victim.write_bytes(b"precious bytes")
    victim = _plant(local, how, victim)
    before = victim.read_bytes()
    with pytest.raises(Exception, match="refusing the stage lock") as exc:
        execute.stage([weights_request(nas, local)])
    assert exc.value.exit_code == ExitCode.REFUSED
    assert victim.read_bytes() == before
    assert not list(local.glob("models--*"))


# ---- item 15: explicit modes -------------------------------------------------------------------


def _modes(root: Path) -> dict[str, int]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            st = p.lstat()
            if not stat.S_ISLNK(st.st_mode):
                out[str(p.relative_to(root))] = stat.S_IMODE(st.st_mode)
    return out


@pytest.mark.parametrize("umask", [0o000, 0o077])
def test_staged_hub_modes_do_not_follow_the_umask(nas, tmp_path, umask):
    local = tmp_path / f"local-{umask:o}"
    old = os.umask(umask)
    try:
        execute.stage([weights_request(nas, local)])
    finally:
        os.umask(old)
    modes = _modes(local)
    assert modes
    dirs = {p: m for p, m in modes.items() if (local / p).is_dir()}
    files = {p: m for p, m in modes.items() if p not in dirs and not p.startswith(".locks")}
    assert set(dirs.values()) == {0o755}, {p: oct(m) for p, m in dirs.items() if m != 0o755}
    assert set(files.values()) == {0o644}, {p: oct(m) for p, m in files.items() if m != 0o644}


# ---- items 6, 7: NAS TOCTOU and non-regular files ------------------------------------------


def _biggest_blob(nas) -> Path:
    blobs = (nas.root / f"models--{WEIGHTS_REPO.replace('/', '--')}" / "blobs").iterdir()
    return max((p for p in blobs if p.is_file() and not p.is_symlink()), key=lambda p: p.stat().st_size)


def _swap(blob: Path, how: str, outside: Path) -> None:
    size = blob.stat().st_size
    if how == "same-size-link":
        outside.write_bytes(b"\xee" * size)  # same size, other bytes, outside the hub root
        blob.unlink()
        blob.symlink_to(outside)
    elif how == "same-size-file":
        tmp = blob.with_name(blob.name + ".new")
        tmp.write_bytes(b"\xee" * size)
        os.replace(tmp, blob)
    elif how == "fifo":
        blob.unlink()
        os.mkfifo(blob)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["same-size-link", "same-size-file", "fifo"])
def test_source_swapped_after_the_scan_is_refused_not_published(nas, local, tmp_path, monkeypatch, how):
    """Item 6: a blob swapped for a same-size symlink after the scan was copied from outside the hub."""
    blob = _biggest_blob(nas)
    outside = tmp_path / "outside.bin"
    real_preflight = execute.preflight

    def preflight_then_swap(*args, **kw):  # after the scan and the decisions, before the first copy
        free = real_preflight(*args, **kw)
        _swap(blob, how, outside)
        return free

    monkeypatch.setattr(execute, "preflight", preflight_then_swap)
    with pytest.raises(SourceError, match="changed since the scan") as exc:
        execute.stage([weights_request(nas, local)], jobs=1)
    assert blob.name in exc.value.message
    assert not (local / blob.relative_to(nas.root)).exists()
    staged = [p for p in local.rglob("*") if p.is_file() and not p.is_symlink()]
    assert all(b"\xee" * 4096 not in p.read_bytes() for p in staged)
    assert not [p for p in local.rglob("*") if ".sf-tmp-" in p.name]


def test_source_swapped_during_the_copy_is_refused_before_publish(nas, local, monkeypatch):
    """Item 6: the chain is re-checked after the bytes are in and before the final name exists."""
    from sparkfleet.stage import copy as copy_mod

    blob = _biggest_blob(nas)
    real = copy_mod._kernel_copy

    def copy_then_swap(src_fd, dst_fd, size, progress):
        real(src_fd, dst_fd, size, progress)
        if os.path.exists(blob) and os.fstat(src_fd).st_ino == blob.stat().st_ino:
            data = blob.read_bytes()
            tmp = blob.with_name(blob.name + ".new")
            tmp.write_bytes(data)  # same bytes even: a new file is not the file we copied
            os.replace(tmp, blob)

    monkeypatch.setattr(copy_mod, "_kernel_copy", copy_then_swap)
    with pytest.raises(SourceError, match="replaced during the copy"):
        execute.stage([weights_request(nas, local)], jobs=1)
    assert not (local / blob.relative_to(nas.root)).exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["tree-listing", "ref", "snapshot-entry"])
def test_fifos_on_the_nas_are_refused_by_type_not_read(nas, local, where):
    """Item 7: FIFOs/devices on the NAS hung staging forever."""
    repo = nas.root / f"models--{WEIGHTS_REPO.replace('/', '--')}"
    commit = nas.weights.commits["main"]
    path = {
        "tree-listing": repo / "trees" / f"{commit}.json",
        "ref": repo / "refs" / "main",
        "snapshot-entry": repo / "snapshots" / commit / "fifo.bin",
    }[where]
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    with pytest.raises(SourceError, match="FIFO"):
        execute.stage([weights_request(nas, local)])
    assert not list(local.glob("models--*"))


@pytest.mark.timeout(60)
def test_a_fifo_planted_in_the_local_hub_is_replaced_not_read(nas, local):
    """A FIFO planted in the local hub where an (empty) file belongs is refused by type and replaced."""
    commit = nas.weights.commits["main"]
    rel = Path(f"models--{WEIGHTS_REPO.replace('/', '--')}") / "snapshots" / commit / "empty.txt"
    (nas.root / rel).write_bytes(b"")
    assert execute.stage([weights_request(nas, local)]).ok
    (local / rel).unlink()
    os.mkfifo(local / rel)
    (report,) = execute.verify([weights_request(nas, local)], "sample")
    assert not report.ok
    assert execute.stage([weights_request(nas, local)]).ok
    assert (local / rel).is_file() and (local / rel).read_bytes() == b""


def test_a_link_retargeted_during_the_copy_stops_the_commit_before_its_ref(nas, local, monkeypatch):
    """Item 6: the chains are re-checked before the ref publishes the commit."""
    from sparkfleet.stage import copy as copy_mod

    commit = nas.weights.commits["main"]
    repo = nas.root / f"models--{WEIGHTS_REPO.replace('/', '--')}"
    entry = repo / "snapshots" / commit / "config.json"
    other = sorted(
        p
        for p in (repo / "blobs").iterdir()
        if p.is_file() and p.name != os.path.basename(os.readlink(entry))
    )[0]
    real = copy_mod._kernel_copy
    done = []

    def copy_then_retarget(src_fd, dst_fd, size, progress):
        real(src_fd, dst_fd, size, progress)
        if not done:
            done.append(True)
            entry.unlink()
            entry.symlink_to(f"../../blobs/{other.name}")

    monkeypatch.setattr(copy_mod, "_kernel_copy", copy_then_retarget)
    with pytest.raises(SourceError, match="changed since the scan"):
        execute.stage([weights_request(nas, local)], jobs=1)
    assert not (local / repo.name / "refs" / "main").exists()
