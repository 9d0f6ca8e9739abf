"""Staging from a NAS that is really remote: sshd in a network namespace, mounted over sshfs."""

from __future__ import annotations

import os

import pytest

from sparkfleet.base.errors import SourceError
from sparkfleet.demo.hubfixture import DRAFTER_REPO, WEIGHTS_REPO, build_nas_hub
from sparkfleet.facts.hubcache import repo_folder
from sparkfleet.stage import execute
from sparkfleet.stage.plan import StageRequest

pytestmark = [pytest.mark.netns, pytest.mark.fuse]


def test_contained_sshfs_mount_gives_a_clear_error(nas_host, sshfs, tmp_path):
    build_nas_hub(nas_host.root / "share" / "hub", shard_bytes=64 * 1024, absolute_links=False)
    mount = sshfs(nas_host, nas_host.root / "share")
    with pytest.raises(SourceError, match="cannot read link") as exc:
        execute.stage([StageRequest(mount / "hub", tmp_path / "local", WEIGHTS_REPO, "main")])
    assert "no_contain_symlinks" in (exc.value.hint or "")
    assert not (tmp_path / "local").exists()


def test_stage_from_sshfs_nas_is_complete_and_local(nas_host, sshfs, tmp_path):
    # The NAS writes its cache on "its" disk; absolute links would name the server's path, so none here.
    fixture = build_nas_hub(nas_host.root / "share" / "hub", shard_bytes=1024 * 1024, absolute_links=False)
    # Debian's sshfs rejects '..' links by default (contain_symlinks); a hub cache is made of them.
    mount = sshfs(nas_host, nas_host.root / "share", extra_opts=("no_contain_symlinks",))
    nas_hub = mount / "hub"
    local = tmp_path / "nvme" / "hub"
    requests = [
        StageRequest(nas_hub, local, WEIGHTS_REPO, "main", exclude=("page15/*",)),
        StageRequest(nas_hub, local, DRAFTER_REPO, "main"),
    ]
    run = execute.stage(requests, jobs=4)
    assert run.ok, [r.verify.problems for r in run.results]
    assert run.copied_bytes > 4 * 1024 * 1024

    # Every link resolves inside the local hub, none through the mount.
    for dirpath, dirnames, filenames in os.walk(local):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                target = os.path.realpath(path)
                assert target.startswith(str(local.resolve()) + os.sep), (path, target)
                assert not target.startswith(str(mount)), (path, target)

    commit = fixture.weights.commits["main"]
    snap = local / repo_folder(WEIGHTS_REPO) / "snapshots" / commit
    for path, data in fixture.weights.files[commit].items():
        if not path.startswith("page15/"):
            assert (snap / path).read_bytes() == data

    # The rerun reads only sample windows over the network and writes nothing.
    again = execute.stage(requests, jobs=4)
    assert again.ok and again.copied_bytes == 0
    assert all(r.ok for r in execute.verify(requests, "full"))
