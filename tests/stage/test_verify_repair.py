"""Verification never trusts mtime or size alone; stage repairs what verify finds; reruns write nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from stage_helpers import drafter_request, tree_state, weights_request

from sparkfleet.base.digests import WINDOW, sample_offsets
from sparkfleet.demo.hubfixture import DRAFTER_REPO, EMBED_FILE, WEIGHTS_REPO
from sparkfleet.facts.hubcache import repo_folder
from sparkfleet.stage import execute, staged


def _blob_of(local: Path, nas, name: str) -> Path:
    """The local regular file a weights snapshot entry resolves to."""
    commit = nas.weights.commits["main"]
    return Path(os.path.realpath(local / repo_folder(WEIGHTS_REPO) / "snapshots" / commit / name))


def _with_source_mtime(path: Path, source: Path) -> None:
    st = source.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _verify(nas, local, mode="sample"):
    (report,) = execute.verify([weights_request(nas, local)], mode)
    return report


def test_rerun_copies_nothing_and_rewrites_nothing(nas, local):
    requests = [weights_request(nas, local), drafter_request(nas, local)]
    execute.stage(requests)
    before = tree_state(local)
    run = execute.stage(requests)
    assert run.ok
    assert run.copied_bytes == 0
    assert all(r.links_written == 0 and r.meta_written == 0 and r.refs_written == 0 for r in run.results)
    assert tree_state(local) == before


def test_truncated_blob_found_and_repaired(nas, local):
    execute.stage([weights_request(nas, local)])
    blob = _blob_of(local, nas, "model-00001-of-00004.safetensors")
    with open(blob, "r+b") as fh:
        fh.truncate(blob.stat().st_size - 100)
    report = _verify(nas, local)
    assert (report.mismatches, report.ok) == (1, False)
    run = execute.stage([weights_request(nas, local)])
    assert run.results[0].repaired_files == 1
    assert _verify(nas, local, "full").ok


def test_corrupted_window_found_by_sample_and_repaired(big_nas, local):
    nas = big_nas
    execute.stage([weights_request(nas, local)])
    blob = _blob_of(local, nas, "model-00003-of-00004.safetensors")
    offset = sample_offsets(blob.stat().st_size)[5] + 17
    with open(blob, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0xFF]))
    assert _verify(nas, local).mismatches == 1
    execute.stage([weights_request(nas, local)])
    assert _verify(nas, local, "full").ok


def test_same_size_swap_with_source_mtime_is_found(nas, local):
    """Lesson 4: two shards share a size; a blob bound to the wrong shard must not pass."""
    execute.stage([weights_request(nas, local)])
    a = _blob_of(local, nas, "model-00001-of-00004.safetensors")
    b = _blob_of(local, nas, "model-00004-of-00004.safetensors")
    assert a.stat().st_size == b.stat().st_size and a != b
    source_a = Path(os.path.realpath(nas.root / a.relative_to(local.resolve())))
    a.write_bytes(b.read_bytes())
    _with_source_mtime(a, source_a)
    report = _verify(nas, local)
    # read whole (its ctime moved since staging recorded it): checked against its content address
    assert report.mismatches == 1 and "!= name" in " ".join(report.problems)
    run = execute.stage([weights_request(nas, local)])
    assert run.results[0].repaired_files == 1
    assert a.read_bytes() == source_a.read_bytes()


def test_corruption_between_windows_needs_full(big_nas, local):
    """The trade: sample reads windows only, --full every byte. A write through the filesystem is
    seen anyway (the staging record's ctime moved: that file is read whole); what the record cannot
    show (here: a tree staged before records existed) only --full finds."""
    nas = big_nas
    execute.stage([weights_request(nas, local)])
    blob = _blob_of(local, nas, "model-00002-of-00004.safetensors")
    offsets = sample_offsets(blob.stat().st_size)
    between = offsets[3] + WINDOW + (offsets[4] - offsets[3] - WINDOW) // 2
    with open(blob, "r+b") as fh:
        fh.seek(between)
        fh.write(b"\x00\x01\x02")
    seen = _verify(nas, local, "sample")
    assert seen.recorded and seen.read_in_full == 1 and seen.mismatches == 1
    for record in (local / staged.FOLDER).rglob("*.json"):
        record.unlink()
    unrecorded = _verify(nas, local, "sample")
    assert unrecorded.ok and not unrecorded.recorded  # the sampled windows alone miss it
    full = _verify(nas, local, "full")
    assert full.mismatches == 1
    assert "sha256" in " ".join(full.problems)  # checked against its content address, not the source
    run = execute.stage([weights_request(nas, local)], verify_mode="full")
    assert run.results[0].repaired_files == 1 and _verify(nas, local, "full").ok


def test_full_verify_does_not_treat_store_names_as_sha256(nas, local):
    execute.stage([weights_request(nas, local), drafter_request(nas, local)], verify_mode="full")
    reports = execute.verify([weights_request(nas, local), drafter_request(nas, local)], "full")
    assert all(r.ok for r in reports)
    store = [p for p in (local / "blobs").rglob("*") if p.is_file() and len(p.name) == 64]
    assert store, "the fixture routes shards through the shared store"


def test_dangling_local_link_and_missing_entry_reported(nas, local):
    execute.stage([weights_request(nas, local)])
    commit = nas.weights.commits["main"]
    snap = local / repo_folder(WEIGHTS_REPO) / "snapshots" / commit
    os.unlink(_blob_of(local, nas, "config.json"))
    (snap / "tokenizer" / "tokenizer_config.json").unlink()
    report = _verify(nas, local)
    assert (report.dangling, report.missing, report.ok) == (1, 1, False)
    assert report.links_ok == len(nas.weights.files[commit]) - 3 - 2
    assert execute.stage([weights_request(nas, local)]).ok
    assert _verify(nas, local).ok


def test_link_pointing_back_at_the_nas_is_dangling(nas, local):
    """A local link that resolves through the NAS is exactly the night-shift bug: never ok."""
    execute.stage([weights_request(nas, local)])
    commit = nas.weights.commits["main"]
    entry = local / repo_folder(WEIGHTS_REPO) / "snapshots" / commit / "config.json"
    target = os.path.realpath(nas.root / repo_folder(WEIGHTS_REPO) / "snapshots" / commit / "config.json")
    entry.unlink()
    entry.symlink_to(target)
    report = _verify(nas, local)
    assert report.dangling == 1 and "escapes" in " ".join(report.problems)
    execute.stage([weights_request(nas, local)])
    assert not os.path.isabs(os.readlink(entry)) and _verify(nas, local).ok


def test_stale_ref_with_newline_rewritten(nas, local):
    execute.stage([weights_request(nas, local)])
    ref = local / repo_folder(WEIGHTS_REPO) / "refs" / "main"
    ref.write_text(nas.weights.commits["main"] + "\n")
    report = _verify(nas, local)
    assert not report.refs_ok and not report.ok
    execute.stage([weights_request(nas, local)])
    assert ref.read_bytes() == nas.weights.commits["main"].encode()


def test_reuse_only_after_content_equality(nas, local):
    """The drafter's embedding blob equals the weights' one: hardlinked after verification."""
    execute.stage([weights_request(nas, local)])
    run = execute.stage([drafter_request(nas, local)])
    assert run.results[0].reused_files == 1
    name = EMBED_FILE
    w = _blob_of(local, nas, name)
    d = Path(
        os.path.realpath(local / repo_folder(DRAFTER_REPO) / "snapshots" / nas.drafter.commits["main"] / name)
    )
    assert w.stat().st_ino == d.stat().st_ino


def test_same_name_different_content_is_not_reused(nas, local, tmp_path):
    """A local blob whose name matches but whose bytes do not is never linked in."""
    execute.stage([weights_request(nas, local)])
    w = _blob_of(local, nas, EMBED_FILE)
    w.write_bytes(os.urandom(w.stat().st_size))  # same name, same size, other bytes
    run = execute.stage([drafter_request(nas, local)])
    assert (run.results[0].reused_files, run.ok) == (0, True)
    d = Path(
        os.path.realpath(
            local
            / repo_folder(DRAFTER_REPO)
            / "snapshots"
            / nas.drafter.commits["main"]
            / EMBED_FILE
        )
    )
    assert d.read_bytes() == nas.drafter.files[nas.drafter.commits["main"]][EMBED_FILE]


@pytest.mark.parametrize("jobs", [1, 4])
def test_parallel_workers_give_the_same_tree(nas, local, jobs):
    run = execute.stage([weights_request(nas, local), drafter_request(nas, local)], jobs=jobs)
    assert run.ok and run.copied_bytes > 0
    assert all(r.ok for r in execute.verify([weights_request(nas, local)], "full"))


def test_verify_names_the_file_and_the_side(nas, local):
    """A deleted local blob read "dangling link on the source"; a mismatch named only a blob hash."""
    execute.stage([weights_request(nas, local)])
    name = "model-00001-of-00004.safetensors"
    blob = _blob_of(local, nas, name)
    with open(blob, "r+b") as fh:
        fh.truncate(blob.stat().st_size - 100)
    report = _verify(nas, local)
    [problem] = report.problems
    assert problem.startswith("mismatch: ") and f"/{name} (local hub blob " in problem
    blob.unlink()
    report = _verify(nas, local)
    [problem] = report.problems
    assert "dangling link on the local hub" in problem and "on the source" not in problem
    assert f"/{name}" in problem and str(local) in problem
