"""Issue 10 item 7: the sshfs process serving the NAS dies mid-stage (ENOTCONN): exit 4, nothing partial."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from sparkfleet.base.errors import ExitCode, SparkfleetError
from sparkfleet.demo.hubfixture import WEIGHTS_REPO, build_nas_hub
from sparkfleet.stage import execute
from sparkfleet.stage.plan import StageRequest

pytestmark = [pytest.mark.netns, pytest.mark.fuse, pytest.mark.timeout(180)]


def sshfs_pid_serving(mountpoint: Path) -> int:
    """The sshfs process this test's fixture started for `mountpoint` (a unique path, so only ours)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == b"sshfs" and os.fsencode(str(mountpoint)) in argv:
            return int(entry)
    raise AssertionError(f"no sshfs process serves {mountpoint}")


def test_sshfs_dying_mid_copy_is_unreachable_and_leaves_nothing_partial(
    nas_host, sshfs, tmp_path, monkeypatch
):
    build_nas_hub(nas_host.root / "share" / "hub", shard_bytes=1024 * 1024, absolute_links=False)
    mount = sshfs(nas_host, nas_host.root / "share", extra_opts=("no_contain_symlinks",))
    local = tmp_path / "local"
    pid = sshfs_pid_serving(mount)
    real_preflight = execute.preflight

    def preflight_then_kill(*args, **kw):
        free = real_preflight(*args, **kw)
        os.kill(pid, signal.SIGKILL)  # the FUSE daemon dies: every access is now ENOTCONN
        return free

    monkeypatch.setattr(execute, "preflight", preflight_then_kill)
    with pytest.raises(SparkfleetError) as exc:
        execute.stage([StageRequest(mount / "hub", local, WEIGHTS_REPO, "main")], jobs=1)
    assert exc.value.exit_code == ExitCode.UNREACHABLE, exc.value
    assert not [p for p in local.rglob("*") if ".sf-tmp-" in p.name]
    assert not list(local.rglob("*.safetensors"))
