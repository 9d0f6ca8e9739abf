"""Issue 10 item 7: OS faults during staging are clear errors with the right exit code, never tracebacks.

Disk full mid-copy, inode exhaustion, a read-only destination, a NAS that vanished, 240–255-byte
and non-UTF-8 names, a destination inside the source, `--wait nan`. Each leaves no partial file
under a final name, and where the fault goes away the rerun converges.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from stage_helpers import weights_request

from sparkfleet.base.errors import ExitCode, SparkfleetError
from sparkfleet.cli import main
from sparkfleet.demo.hubfixture import WEIGHTS_REPO, build_nas_hub
from sparkfleet.facts.hubcache import repo_folder
from sparkfleet.stage import execute

pytestmark = pytest.mark.timeout(120)


def final_names_are_whole(local: Path, nas_root: Path) -> None:
    """Every regular file under a final name equals its source; no temp is left behind."""
    for path in local.rglob("*"):
        assert ".sf-tmp-" not in path.name, path
        rewritten = path.name.endswith(".refs") or "trees" in path.parts  # local manifests/listings
        if path.is_file() and not path.is_symlink() and ".locks" not in path.parts and not rewritten:
            src = nas_root / path.relative_to(local)
            if src.exists():
                assert path.read_bytes() == src.read_bytes(), path


def cli(*args: str):
    out = CliRunner().invoke(main, list(args))
    assert "Traceback" not in out.output, out.output
    return out


def test_disk_full_mid_copy_is_a_space_error_and_the_rerun_converges(tmp_path, tmpfs, monkeypatch):
    nas = build_nas_hub(tmp_path / "nas", shard_bytes=1024 * 1024)
    small = tmpfs(16 * 1024 * 1024)
    dest = small / "hub"
    filler = small / "filler"
    real_preflight = execute.preflight

    def preflight_then_fill(*args, **kw):  # another writer fills the disk after our preflight
        free = real_preflight(*args, **kw)
        with open(filler, "wb") as fh:
            try:
                while True:
                    fh.write(b"\0" * (1 << 20))
            except OSError:
                pass
        return free

    monkeypatch.setattr(execute, "preflight", preflight_then_fill)
    with pytest.raises(SparkfleetError, match="no space left") as exc:
        execute.stage([weights_request(nas, dest)], jobs=1)
    assert exc.value.exit_code == ExitCode.SPACE
    final_names_are_whole(dest, nas.root)
    monkeypatch.setattr(execute, "preflight", real_preflight)
    filler.unlink()
    assert execute.stage([weights_request(nas, dest)]).ok
    final_names_are_whole(dest, nas.root)


def test_inode_exhaustion_is_refused_by_the_preflight(tmp_path, tmpfs):
    nas = build_nas_hub(tmp_path / "nas", shard_bytes=64 * 1024)
    small = tmpfs(64 * 1024 * 1024, options="nr_inodes=24")  # bytes aplenty, few inodes
    dest = small / "hub"
    with pytest.raises(SparkfleetError, match="not enough inodes") as exc:
        execute.stage([weights_request(nas, dest)])
    assert exc.value.exit_code == ExitCode.SPACE
    assert not list(dest.glob("models--*"))


def test_read_only_destination_is_a_clear_error(tmp_path, tmpfs):
    nas = build_nas_hub(tmp_path / "nas", shard_bytes=64 * 1024)
    mnt = tmpfs(8 * 1024 * 1024)
    subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
    out = cli("stage", "--source", str(nas.root), "--dest", str(mnt / "hub"), "--repo", WEIGHTS_REPO)
    assert out.exit_code == ExitCode.USAGE, out.output
    assert "read-only file system" in out.output and str(mnt / "hub") in out.output


def test_nas_vanishing_mid_run_is_unreachable_not_a_traceback(tmp_path, tmpfs, monkeypatch):
    nas_mount = tmpfs(32 * 1024 * 1024)
    nas = build_nas_hub(nas_mount / "hub", shard_bytes=256 * 1024)
    dest = tmp_path / "local"
    real_preflight = execute.preflight

    def preflight_then_unmount(*args, **kw):
        free = real_preflight(*args, **kw)
        subprocess.run(["umount", "-l", str(nas_mount)], check=True)  # the NAS goes away
        return free

    monkeypatch.setattr(execute, "preflight", preflight_then_unmount)
    with pytest.raises(SparkfleetError) as exc:
        execute.stage([weights_request(nas, dest)], jobs=1)
    assert exc.value.exit_code == ExitCode.UNREACHABLE, exc.value
    assert "vanished" in exc.value.message or "went away" in exc.value.message
    assert not [p for p in dest.rglob("*") if ".sf-tmp-" in p.name]


@pytest.mark.parametrize("length", [240, 250, 255])
def test_long_and_non_utf8_names_stage(nas, local, length):
    """A 240–255-byte name is legal; its temp name must fit NAME_MAX too."""
    commit = nas.weights.commits["main"]
    snap = nas.root / repo_folder(WEIGHTS_REPO) / "snapshots" / commit
    long_name = "n" * (length - 4) + ".bin"
    odd = os.fsdecode(b"caf\xe9-" + b"x" * (length - 10) + b".bin")  # Latin-1 bytes: not UTF-8
    (snap / long_name).write_bytes(b"long name payload")
    (snap / odd).write_bytes(b"non-utf8 payload")
    run = execute.stage([weights_request(nas, local)])
    assert run.ok
    staged = local / repo_folder(WEIGHTS_REPO) / "snapshots" / commit
    assert (staged / long_name).read_bytes() == b"long name payload"
    assert (staged / odd).read_bytes() == b"non-utf8 payload"
    again = execute.stage([weights_request(nas, local)])
    assert again.ok and again.copied_bytes == 0


def test_dest_inside_source_is_refused(nas):
    for dest in (nas.root, nas.root / "mirror", nas.root / "models--x" / ".." / "inner"):
        out = cli("stage", "--source", str(nas.root), "--dest", str(dest), "--repo", WEIGHTS_REPO)
        assert out.exit_code == ExitCode.USAGE, out.output
        assert "inside the source" in out.output or "is the source" in out.output
    assert not (nas.root / "mirror").exists() and not (nas.root / "inner").exists()


@pytest.mark.parametrize("wait", ["nan", "inf", "-1"])
def test_wait_must_be_a_finite_number_of_seconds(nas, local, wait):
    out = cli(
        "stage", "--source", str(nas.root), "--dest", str(local), "--repo", WEIGHTS_REPO, "--wait", wait
    )
    assert out.exit_code == ExitCode.USAGE, out.output
    assert "--wait" in out.output
    assert not local.exists()
