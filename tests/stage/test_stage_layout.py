"""Staged trees are complete, local, and readable by real huggingface_hub offline."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from stage_helpers import all_links_resolve_inside, drafter_request, weights_request

from sparkfleet.demo.hubfixture import DRAFTER_REPO, WEIGHTS_REPO
from sparkfleet.facts.hubcache import repo_folder
from sparkfleet.stage import execute


def test_every_link_target_materialized_and_local(nas, local):
    run = execute.stage([weights_request(nas, local), drafter_request(nas, local)], jobs=3)
    assert run.ok, [r.verify.problems for r in run.results]
    assert all_links_resolve_inside(local) == []
    commit = nas.weights.commits["main"]
    snap = local / repo_folder(WEIGHTS_REPO) / "snapshots" / commit
    for path, data in nas.weights.files[commit].items():
        if path.startswith("page15/"):
            continue
        assert (snap / path).read_bytes() == data, path
    # The shard reached through an absolute NAS link got a relative local link.
    for link in (local / repo_folder(WEIGHTS_REPO) / "blobs").iterdir():
        if link.is_symlink():
            assert not os.path.isabs(os.readlink(link)), link
    # The three-hop chain (snapshot → blob → alias → shared store) is mirrored hop for hop.
    aliases = [
        p for p in (local / repo_folder(WEIGHTS_REPO) / "blobs").iterdir() if p.name.startswith("dedup-")
    ]
    assert len(aliases) == 1 and aliases[0].is_symlink()
    assert (local / "blobs" / ".huggingface-shared-blobs").read_text() == "1\n"


def test_same_relative_links_as_source(nas, local):
    execute.stage([weights_request(nas, local)])
    commit = nas.weights.commits["main"]
    rel_snap = Path(repo_folder(WEIGHTS_REPO), "snapshots", commit)
    for entry in (nas.root / rel_snap).rglob("*"):
        if entry.is_symlink():
            assert os.readlink(local / entry.relative_to(nas.root)) == os.readlink(entry)


def test_optional_pack_excluded_and_reported(nas, local):
    run = execute.stage([weights_request(nas, local)])
    commit = nas.weights.commits["main"]
    page15 = nas.weights.optional[commit]
    result = run.results[0]
    assert result.excluded_entries == len(page15)
    assert result.excluded_bytes == sum(len(nas.weights.files[commit][p]) for p in page15)
    assert not (local / repo_folder(WEIGHTS_REPO) / "snapshots" / commit / "page15").exists()


def test_real_files_in_snapshot_copied_when_included(nas, local):
    run = execute.stage([weights_request(nas, local, exclude=())])
    assert run.ok
    commit = nas.weights.commits["main"]
    for path in nas.weights.optional[commit]:
        local_file = local / repo_folder(WEIGHTS_REPO) / "snapshots" / commit / path
        assert local_file.is_file() and not local_file.is_symlink()
        assert local_file.read_bytes() == nas.weights.files[commit][path]


def test_include_patterns_select_like_huggingface_hub(nas, local):
    run = execute.stage([weights_request(nas, local, include=("*.json",), exclude=())])
    assert run.ok
    commit = nas.weights.commits["main"]
    snap = local / repo_folder(WEIGHTS_REPO) / "snapshots" / commit
    staged = sorted(p.relative_to(snap).as_posix() for p in snap.rglob("*") if not p.is_dir())
    # `*` crosses `/` in fnmatch, as in huggingface_hub's allow_patterns.
    assert staged == sorted(p for p in nas.weights.files[commit] if p.endswith(".json"))


def test_metadata_refs_trees_no_exist_and_what_is_never_copied(nas, local):
    execute.stage([weights_request(nas, local)])
    repo = local / repo_folder(WEIGHTS_REPO)
    commit = nas.weights.commits["main"]
    assert (repo / "refs" / "main").read_bytes() == commit.encode()  # no trailing newline
    assert not (repo / "refs" / "v0").exists()  # points at the other revision
    assert not (repo / "snapshots" / nas.weights.commits["old"]).exists()
    listing = json.loads((repo / "trees" / f"{commit}.json").read_text())
    assert sorted(listing["files"]) == sorted(
        p for p in nas.weights.files[commit] if not p.startswith("page15/")
    )
    assert (repo / ".no_exist" / commit / "generation_config.json").is_file()
    ours = ["sparkfleet-stage.lock", "sparkfleet-staged"]  # the lock, the staging record (stage/staged.py)
    assert sorted(p.name for p in (local / ".locks").iterdir()) == ours  # ours only
    assert not list(local.rglob("*.incomplete"))


def test_older_revision_by_ref_and_by_commit_prefix(nas, local):
    old = nas.weights.commits["old"]
    run = execute.stage([weights_request(nas, local, revision="v0")])
    assert run.ok and run.results[0].commit == old
    assert (local / repo_folder(WEIGHTS_REPO) / "refs" / "v0").read_bytes() == old.encode()
    run = execute.stage([weights_request(nas, local, revision=old[:10])])
    assert run.ok and run.results[0].commit == old


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)


def test_real_huggingface_hub_reads_staged_tree_offline(nas, local, offline):
    from huggingface_hub import hf_hub_download, scan_cache_dir, snapshot_download
    from safetensors import safe_open

    execute.stage([weights_request(nas, local), drafter_request(nas, local)])
    info = scan_cache_dir(local)
    assert info.warnings == []
    assert {r.repo_id for r in info.repos} == {WEIGHTS_REPO, DRAFTER_REPO}
    for repo, truth in ((WEIGHTS_REPO, nas.weights), (DRAFTER_REPO, nas.drafter)):
        path = snapshot_download(repo, revision=truth.commits["main"], cache_dir=local, local_files_only=True)
        assert Path(path).resolve().is_relative_to(local.resolve())
        by_ref = snapshot_download(repo, cache_dir=local, local_files_only=True)  # through refs/main
        assert by_ref == path
    shard = hf_hub_download(
        WEIGHTS_REPO, "model-00002-of-00004.safetensors", cache_dir=local, local_files_only=True
    )
    assert os.path.realpath(shard).startswith(os.path.realpath(local))
    with safe_open(shard, framework="numpy") as f:
        names = list(f.keys())  # noqa: SIM118 (safe_open is no dict)
        assert "model.layers.1.mlp.experts.0.gate_proj.weight" in names
        assert all(k.startswith("model.layers.1.") for k in names)
        hidden = json.loads(Path(shard).with_name("config.json").read_text())["hidden_size"]
        assert f.get_slice("model.layers.1.input_layernorm.weight").get_shape() == [hidden]
    index = json.loads(
        Path(
            hf_hub_download(
                WEIGHTS_REPO, "model.safetensors.index.json", cache_dir=local, local_files_only=True
            )
        ).read_text()
    )
    for name, shard_name in index["weight_map"].items():
        with safe_open(
            hf_hub_download(WEIGHTS_REPO, shard_name, cache_dir=local, local_files_only=True),
            framework="numpy",
        ) as f:
            assert name in f.keys()  # noqa: SIM118 (safe_open has no __contains__)


def test_source_tree_listing_breaks_offline_load_without_rewrite(nas, local, offline):
    """Control: copying the NAS listing verbatim (page15 listed, not staged) makes huggingface_hub refuse."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import IncompleteSnapshotError

    execute.stage([weights_request(nas, local)])
    commit = nas.weights.commits["main"]
    rel = Path(repo_folder(WEIGHTS_REPO), "trees", f"{commit}.json")
    (local / rel).write_bytes((nas.root / rel).read_bytes())
    import huggingface_hub._tree_cache as tc

    tc._IN_MEMORY_TREE_CACHE.clear()
    with pytest.raises(IncompleteSnapshotError):
        snapshot_download(WEIGHTS_REPO, revision=commit, cache_dir=local, local_files_only=True)
