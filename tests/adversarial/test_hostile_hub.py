"""Property: staging a hostile hub tree refuses cleanly or stages exactly the source, nothing else.

Hypothesis mutates a NAS-like hub (links escaping the root, link loops, FIFOs, directory links,
dangling links, 200–255-byte and non-UTF-8 names, blobs swapped for same-size other bytes) and
stages it. Either the stager raises a SparkfleetError — and then nothing was written outside the
destination, no final name holds a partial file, and a FIFO was never opened — or it succeeds,
and then every staged file equals its source, every link resolves inside the local hub, no byte
from outside the hub root was read into it, and with `--full` every sha256-named blob
hashes to its name.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkfleet.base.errors import SparkfleetError
from sparkfleet.demo.hubfixture import WEIGHTS_REPO, build_nas_hub
from sparkfleet.facts.hubcache import repo_folder
from sparkfleet.stage import execute
from sparkfleet.stage.plan import StageRequest

from .tally import bad_input, count

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

OUTSIDE = b"OUTSIDE-THE-HUB-" * 64
# Mutations that make the tree unsafe to stage: any of them must be refused.
MUST_REFUSE = {
    "escape-abs",
    "escape-rel",
    "loop",
    "fifo-entry",
    "fifo-blob",
    "dir-link",
    "dangling",
    "fifo-tree",
}
MUTATIONS = [
    "escape-abs", "escape-rel", "loop", "fifo-entry", "fifo-blob", "dir-link", "dangling",
    "long-name", "non-utf8", "swapped-blob", "fifo-tree", "symlinked-ref",
]  # fmt: skip


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pristine")
    build_nas_hub(root / "hub", shard_bytes=16 * 1024, absolute_links=False)
    return root / "hub"


def _snapshot(hub: Path) -> Path:
    repo = hub / repo_folder(WEIGHTS_REPO)
    return repo / "snapshots" / (repo / "refs" / "main").read_text()


def _mutate(hub: Path, outside: Path, what: str, n: int) -> None:
    snap = _snapshot(hub)
    repo = snap.parent.parent
    entries = sorted(p for p in snap.rglob("*") if p.is_symlink() or p.is_file())
    entry = entries[n % len(entries)]
    # blobs the snapshot reads (a FIFO or swap in a blob nobody reads is harmless by design)
    blobs = sorted(
        {Path(os.path.realpath(p)) for p in entries if os.path.realpath(p).startswith(str(repo / "blobs"))}
    )
    blob = blobs[n % len(blobs)]
    if what == "escape-abs":
        entry.unlink()
        entry.symlink_to(outside)
    elif what == "escape-rel":
        entry.unlink()
        entry.symlink_to(os.path.relpath(outside, entry.parent))
    elif what == "loop":
        partner = entry.parent / (entry.name + ".loop")
        entry.unlink()
        entry.symlink_to(partner.name)
        partner.unlink(missing_ok=True)
        partner.symlink_to(entry.name)
    elif what == "fifo-entry":
        entry.unlink(missing_ok=True)
        os.mkfifo(entry)
    elif what == "fifo-blob":
        blob.unlink(missing_ok=True)
        os.mkfifo(blob)
    elif what == "fifo-tree":
        tree = repo / "trees" / f"{snap.name}.json"
        tree.unlink(missing_ok=True)
        os.mkfifo(tree)
    elif what == "dir-link":
        (snap / f"linked-dir-{n}").unlink(missing_ok=True)
        (snap / f"linked-dir-{n}").symlink_to(outside.parent, target_is_directory=True)
    elif what == "dangling":
        entry.unlink()
        entry.symlink_to(f"../../blobs/{'0' * 64}")
    elif what == "long-name":
        (snap / ("L" * (200 + n % 56))).write_bytes(b"long")
    elif what == "non-utf8":
        (snap / os.fsdecode(b"bad-\xff\xfe-" + str(n).encode())).write_bytes(b"latin")
    elif what == "swapped-blob" and blob.is_file():
        size = blob.stat().st_size
        blob.write_bytes(bytes((b + 1) % 256 for b in blob.read_bytes()) if size else b"")
    elif what == "symlinked-ref":
        ref = repo / "refs" / "v0"
        ref.unlink(missing_ok=True)
        ref.symlink_to(outside)


def _tree(root: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_file():
                out[rel] = p.read_bytes()
    return out


@pytest.mark.surface("file:hub tree")
@given(
    mutations=st.lists(st.tuples(st.sampled_from(MUTATIONS), st.integers(0, 1000)), min_size=1, max_size=3),
    mode=st.sampled_from(["sample", "full"]),
)
def test_hostile_hub_refused_or_staged_exactly(pristine, tmp_path_factory, figures, mutations, mode):
    work = tmp_path_factory.mktemp("hostile")
    hub = work / "nas" / "hub"
    shutil.copytree(pristine, hub, symlinks=True)
    outside = work / "secret" / "outside.bin"
    outside.parent.mkdir()
    outside.write_bytes(OUTSIDE)
    for what, n in mutations:
        _mutate(hub, outside, what, n)
    kinds = {what for what, _ in mutations}
    must_refuse = bool(kinds & MUST_REFUSE) or ("swapped-blob" in kinds and mode == "full")
    count(figures, "hub", "trees_tried")
    around = {p: _tree(p) for p in (work / "secret",)}
    local = work / "local" / "hub"
    try:
        run = execute.stage([StageRequest(hub, local, WEIGHTS_REPO, "main")], verify_mode=mode, jobs=2)
    except SparkfleetError:
        run = None
    if must_refuse:  # MUST_REFUSE (the test's oracle) knows the tree is bad, not the stager
        bad_input(figures, "hub", refused=run is None)
    elif run is None:
        count(figures, "hub", "refused_without_a_known_reason")
    assert {p: _tree(p) for p in around} == around  # nothing outside the destination changed
    staged = _tree(local) if local.exists() else {}
    for rel, content in staged.items():
        assert ".sf-tmp-" not in rel, rel
        if isinstance(content, bytes):
            assert OUTSIDE[:32] not in content, f"{rel} holds bytes from outside the hub"
            src = hub / rel
            if (
                src.is_file()
                and not rel.startswith(".locks")
                and "/trees/" not in rel
                and not rel.endswith(".refs")
            ):
                assert content == src.read_bytes(), f"{rel}: partial or foreign bytes under a final name"
                name = Path(rel).name
                if mode == "full" and "/blobs/" in rel and len(name) == 64:
                    assert hashlib.sha256(content).hexdigest() == name, f"{rel}: swapped blob published"
        else:
            target = os.path.realpath(local / rel)
            assert target.startswith(str(local.resolve()) + os.sep) or not os.path.exists(target), rel
    if run is not None:
        assert not must_refuse, f"{sorted(kinds)} ({mode}) was staged"
        count(figures, "hub", "odd_but_legal_trees_staged")
        assert run.ok
