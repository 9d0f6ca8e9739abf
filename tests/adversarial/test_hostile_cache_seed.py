"""The kernel-cache seed against a hostile kit: its tar, its lock, its CACHE_ROOTS line, and a rank's /cache.

The seed trusts what the kit's lock pins (the tar's sha256, the manifest's sha256) and reads the
rest out of the kit: the tar's members, their pax headers, the CACHE_ROOTS assignment in the kit's
Python source, and the lane's /cache that a previous rank wrote. Each is attacked here as a kit
author or a misbehaving rank would: a 10,240-byte tar, pinned by its lock, whose sparse member
unpacked to 257 MB; pax mtimes that are no time; CACHE_ROOTS spelled as Python spells sets; a
dangling link at /cache/tmp. Every outcome must be a whole verified tree or a clean refusal naming
the file, answered by the node agent as an answer (never a traceback that kills it). The oracle is
the test's own: it knows which member is unlisted, which mtime is no time, which roots are the kit's.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkfleet.base.errors import ExitCode, SparkfleetError
from sparkfleet.base.jsonable import to_jsonable
from sparkfleet.fleet import inventory
from sparkfleet.fleet.cacheseed import cache_roots
from sparkfleet.node import records
from sparkfleet.node.seedprep import prepare
from support.seedkit import (
    CACHE_FILES,
    CACHE_ROOTS_LINE,
    MTIME_NS,
    cache_manifest,
    cache_tar,
    image_archive,
    kit_lock,
    lane_seed,
    placed,
    placed_asset,
    probe_seed,
    rank_spec,
    seed_dockerd,
    seed_kit,
)

from .tally import bad_input, count

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

SURFACE = "cache-seed"
KIT_ROOTS = frozenset(
    {"flashinfer", "tilelang", "triton", "torch-extensions", "cuda", "vllm", "exllamav3", "numba", "torch"}
)
HUGE = 257_000_000  # what the sparse member claimed
NODE_AGENT = [sys.executable, "-m", "sparkfleet.node.agent"]


def _sparse(name: str, size: int) -> tarfile.TarInfo:
    """A member whose pax header says it is `size` bytes, all hole: a header block or two on disk."""
    info = tarfile.TarInfo(name)
    info.size = 0
    info.pax_headers = {"GNU.sparse.map": "0,0", "GNU.sparse.size": str(size)}
    return info


def _tree_bytes(tree: Path) -> int:
    """Bytes of every file under `tree` as unpacked (apparent size: a hole counts as written)."""
    return sum(p.stat().st_size for p in tree.rglob("*") if p.is_file() and not p.is_symlink())


def _listed_bytes(files: dict[str, bytes]) -> int:
    return sum(len(d) for d in files.values()) + len(cache_manifest(files))


@pytest.mark.netns
@pytest.mark.slow
@pytest.mark.surface("file:kit kernel-cache.tar", "file:kit recipe-lock.json", "agent:probe")
def test_a_sparse_tar_pinned_by_its_lock_unpacks_only_what_the_manifest_lists(tmp_path, monkeypatch, figures):
    """The image holds a tar of a few kB whose one member, not in the manifest, says it is 257 MB
    of holes; the kit's lock pins that tar. Copied out of a real dockerd's image and unpacked by the
    agent's own probe: only the manifest's files land in the tree, at the manifest's sizes."""
    manifest = cache_manifest(CACHE_FILES)
    asset = cache_tar(CACHE_FILES, manifest, [_sparse("triton/5Xk2/huge.cubin", HUGE)])
    assert len(asset) < 64 * 1024  # a small tar that claims a large tree
    tar, image = image_archive(tmp_path, asset, "sparse")
    with seed_dockerd([tar]) as daemon:
        monkeypatch.setenv("DOCKER_HOST", daemon.host)
        inv, _ = seed_kit(tmp_path, kit_lock(asset, manifest, image.removeprefix("sha256:")))
        seed = lane_seed(inv, "docker", image)
        facts = probe_seed(inv, seed, make=True).cache_seed
    tree = Path(seed.store) / hashlib.sha256(asset).hexdigest() / "tree"
    unpacked = _tree_bytes(tree) if tree.is_dir() else 0
    bad_input(figures, SURFACE, refused=unpacked <= _listed_bytes(CACHE_FILES))
    assert facts["ok"] and facts["made"] and facts["files"] == len(CACHE_FILES), facts
    assert not (tree / "triton/5Xk2/huge.cubin").exists()
    assert unpacked == _listed_bytes(CACHE_FILES)  # the manifest's files and the manifest, nothing else


@pytest.mark.surface("file:kit kernel-cache.tar")
@pytest.mark.parametrize("claimed", [HUGE, 1])
def test_a_listed_member_at_another_size_than_the_manifest_lists_is_refused_before_it_is_written(
    tmp_path, figures, claimed
):
    """A member the manifest lists, whose header claims another size (a sparse 257 MB, or 1 byte):
    refused naming it, before a byte of it is written."""
    name = "cuda/ComputeCache/index"
    manifest = cache_manifest(CACHE_FILES)
    others = {n: d for n, d in CACHE_FILES.items() if n != name}
    if claimed == HUGE:
        asset = cache_tar(others, manifest, [_sparse(name, claimed)])
    else:
        asset = cache_tar({**others, name: b"x" * claimed}, manifest)
    seed = placed_asset(tmp_path, asset, manifest)
    with pytest.raises(SparkfleetError) as exc:
        prepare(seed)
    refused = f"'{name}' is {claimed} bytes, the manifest lists {len(CACHE_FILES[name])}" in exc.value.message
    bad_input(figures, SURFACE, refused)
    assert refused, exc.value.message
    assert exc.value.exit_code == ExitCode.REFUSED
    store = Path(seed.store) / hashlib.sha256(asset).hexdigest()
    assert not (store / "tree").exists()
    assert _tree_bytes(store) < len(asset) + 64 * 1024  # the tar, and less than a member's worth besides


NO_TIME = ["inf", "-inf", "nan", "1e300", "-1", "9223372037"]


@pytest.mark.surface("file:kit kernel-cache.tar", "agent:probe")
@pytest.mark.parametrize("mtime", NO_TIME)
def test_a_pax_mtime_that_is_no_time_is_a_clean_refusal(tmp_path, figures, mtime):
    """A listed file whose manifest row carries no mtime_ns keeps the tar's mtime; a pax header
    saying inf, nan or 1e300 raised OverflowError/ValueError out of the agent's probe."""
    name = "cuda/ComputeCache/index"
    doc = json.loads(cache_manifest(CACHE_FILES))
    del doc["files"][name]["mtime_ns"]
    manifest = json.dumps(doc, sort_keys=True).encode()
    asset = cache_tar(CACHE_FILES, manifest, pax={name: {"mtime": mtime}})
    seed = placed_asset(tmp_path, asset, manifest)
    facts = probe_seed(inventory.load(tmp_path / "fleet"), seed, make=True).cache_seed
    problem = facts.get("problem", "")
    refused = facts["ok"] is False and f"'{name}': mtime" in problem and "is not a time" in problem
    bad_input(figures, SURFACE, refused)
    assert refused, facts
    assert "kernel-cache.tar" in facts["problem"] and facts["hint"]


# How Python spells a set: each is the kit's own roots, written another way; each must be read as them.
UNDERSTOOD = {
    "frozenset": "CACHE_ROOTS = frozenset({'flashinfer', 'tilelang', 'triton', 'torch-extensions', 'cuda',\n"
    "    'vllm', 'exllamav3', 'numba', 'torch'})\n",
    "union": "CACHE_ROOTS = {'flashinfer', 'tilelang', 'triton', 'torch-extensions'} | {'cuda', 'vllm',\n"
    "    'exllamav3', 'numba', 'torch'}\n",
    "set-of-list": "CACHE_ROOTS = set(['flashinfer', 'tilelang', 'triton', 'torch-extensions', 'cuda',\n"
    "    'vllm', 'exllamav3', 'numba', 'torch'])\n",
    "annotated-or-equal": "CACHE_ROOTS: frozenset[str] = frozenset(('flashinfer', 'tilelang', 'triton'))\n"
    "CACHE_ROOTS |= {'torch-extensions', 'cuda', 'vllm'} | frozenset({'exllamav3', 'numba', 'torch'})\n",
    "reassigned": "CACHE_ROOTS = {'old'}\n" + CACHE_ROOTS_LINE,
}
# What cannot be known without running the file, or is not one directory name: refused, naming it.
REFUSED = {
    "call": "def compute():\n    return {'triton'}\n\nCACHE_ROOTS = compute()\n",
    "comprehension": "CACHE_ROOTS = frozenset(x for x in ('triton', 'cuda'))\n",
    "f-string": "v = 'ton'\nCACHE_ROOTS = {f'tri{v}'}\n",
    "not-strings": "CACHE_ROOTS = {1, 2}\n",
    "dotdot": "CACHE_ROOTS = {'triton', '../../../../tmp/planted'}\n",
    "a-path": "CACHE_ROOTS = {'triton', 'cuda/../../x'}\n",
    "absolute": "CACHE_ROOTS = {'/etc'}\n",
    "empty": "CACHE_ROOTS = frozenset()\n",
    "absent": "CACHE_ROOTZ = {'triton'}\n",
    "minus": "CACHE_ROOTS = {'triton', 'cuda'} - {'cuda'}\n",
    "deep-union": "CACHE_ROOTS = " + " | ".join(["{'triton'}"] * 2000) + "\n",  # parses; deep to read
    "deeper-union": "CACHE_ROOTS = " + " | ".join(["{'triton'}"] * 5000) + "\n",  # too deep to parse
    "not-python": "CACHE_ROOTS = {'triton'\n",
}


def _roots_seed(tmp_path: Path, source: str):
    """A placed store of CACHE_FILES whose kit's portable_node.py is `source`."""
    return placed(tmp_path, CACHE_FILES, release__runtime__tools__portable_node_dot_py=source.encode())


@pytest.mark.surface("file:kit cache_roots source")
@pytest.mark.parametrize("spelling", sorted(UNDERSTOOD))
def test_cache_roots_as_python_spells_a_set_are_read_as_the_kits(tmp_path, spelling):
    seed = _roots_seed(tmp_path, "import os\n\n" + UNDERSTOOD[spelling])
    assert cache_roots(seed) == KIT_ROOTS
    assert prepare(seed).made  # and the tree is made with them


@pytest.mark.surface("file:kit cache_roots source", "agent:probe")
@pytest.mark.parametrize("spelling", sorted(REFUSED))
def test_cache_roots_that_cannot_be_read_without_running_the_file_are_refused(tmp_path, figures, spelling):
    seed = _roots_seed(tmp_path, "import os\n\n" + REFUSED[spelling])
    inv = inventory.load(tmp_path / "fleet")
    facts = probe_seed(inv, seed, make=False).cache_seed  # doctor's question: it reads the kit's file
    refused = facts["ok"] is False and "portable_node.py" in facts["problem"]
    bad_input(figures, SURFACE, refused)
    assert refused, facts
    with pytest.raises(SparkfleetError) as exc:
        cache_roots(seed)
    assert exc.value.exit_code == ExitCode.REFUSED
    assert not (tmp_path / "planted").exists() and not Path("/tmp/planted").exists()


def _agent(action: str, request: dict) -> tuple[subprocess.CompletedProcess, dict | None]:
    """The node agent as the controller runs it: one JSON request on stdin, one answer on stdout."""
    proc = subprocess.run(
        [*NODE_AGENT, action], input=json.dumps(request), capture_output=True, text=True, timeout=120
    )
    lines = proc.stdout.strip().splitlines()
    try:
        return proc, json.loads(lines[-1]) if lines else None
    except ValueError:
        return proc, None


@pytest.mark.surface("agent:start")
@pytest.mark.parametrize("left", ["dangling-link", "link-out", "file"])
def test_what_a_rank_left_at_cache_tmp_is_answered_as_a_refusal(tmp_path, figures, left):
    """A dangling link a rank left at /cache/tmp made seeding raise a raw FileExistsError, which
    killed the agent's start (no answer, a traceback). It is refused, naming the path; nothing is
    started and nothing is written through the link."""
    seed = placed(tmp_path, CACHE_FILES)
    cache = tmp_path / "lane-cache"
    cache.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    tmp = cache / "tmp"
    if left == "dangling-link":
        tmp.symlink_to("/cache/tmp.gone")  # a path inside the container, dangling on the host
    elif left == "link-out":
        tmp.symlink_to(outside)
    else:
        tmp.write_bytes(b"a rank's file\n")
    spec = rank_spec(tmp_path, seed, cache)
    proc, answer = _agent("start", {"spec": to_jsonable(spec)})
    refused = (
        proc.returncode == 0 and answer is not None and answer["ok"] is False
        and f"{tmp} is a link or a file" in answer["error"] and "Traceback" not in proc.stderr
    )  # fmt: skip
    bad_input(figures, SURFACE, refused)
    assert refused, (proc.stdout, proc.stderr)
    assert answer["hint"] and str(tmp) in answer["hint"]
    assert records.load_all(Path(spec.state_dir), spec.lane) == []  # nothing started
    assert list(outside.iterdir()) == []
    assert sorted(p.name for p in cache.iterdir()) == ["tmp"]  # refused before anything was seeded
    assert tmp.is_symlink() or tmp.read_bytes() == b"a rank's file\n"  # never deleted


@pytest.mark.surface("agent:probe")
def test_an_action_that_fails_unforeseen_is_answered_not_a_dead_agent(tmp_path, figures):
    """The agent caught only SparkfleetError: anything else one action raised left the controller
    with no answer and a traceback. A request whose kit checkout is a number (a TypeError in the
    agent) is answered as that action's error, exit_code 70, the traceback on stderr only. (Each
    field's JSON type is checked before the action runs: the number hides one level down.)"""
    kits = {"host": "dgx1", "checkouts": [{"trees": 5}], "state_dir": "/nonexistent"}
    request = {"models": [], "kits": kits}
    proc, answer = _agent("probe", request)
    answered = proc.returncode == 0 and answer is not None and answer["ok"] is False
    bad_input(figures, SURFACE, answered)
    assert answered, (proc.stdout, proc.stderr)
    assert answer["exit_code"] == ExitCode.CRASHED
    assert answer["error"].startswith("agent probe failed on this node: ")
    assert "TypeError" in answer["error"] and "Traceback" in proc.stderr and "Traceback" not in proc.stdout


# Pax header records a hostile tar may carry on a listed member (no mtime_ns in its manifest row, so
# the tar's mtime counts): times that are none, sizes and sparse maps that lie, names that leave.
PAX_VALUES = {
    "mtime": ["inf", "nan", "1e300", "-1", "abc", "1700000000.5", "9223372037", "0"],
    "size": ["0", "1", "-1", "1e3", "999999999999"],
    "path": ["../escape", "/abs/olute", "cuda//ComputeCache/index", "cuda/ComputeCache/./index"],
    "GNU.sparse.map": ["0,0", "a,b", "0", "0,1,2", "-5,10"],
    "GNU.sparse.size": [str(HUGE), "-1", "x", "512"],
    "uid": ["1e400", "-1"],
    "linkpath": ["/etc/passwd"],
}


@pytest.mark.surface("file:kit kernel-cache.tar")
@given(pax=st.dictionaries(st.sampled_from(sorted(PAX_VALUES)), st.integers(0, 9), min_size=1, max_size=4))
def test_any_pax_header_on_a_listed_member_ends_in_a_whole_tree_or_a_refusal(tmp_path_factory, figures, pax):
    """Property: whatever pax records a listed member carries, preparing the tree raises only a
    SparkfleetError (exit 5, the tar named) or makes a tree holding exactly the manifest's files,
    each at its size and sha256; nothing is written outside the store, nothing unlisted is unpacked."""
    name = "cuda/ComputeCache/index"
    records_ = {k: PAX_VALUES[k][i % len(PAX_VALUES[k])] for k, i in pax.items()}
    doc = json.loads(cache_manifest(CACHE_FILES))
    del doc["files"][name]["mtime_ns"]
    manifest = json.dumps(doc, sort_keys=True).encode()
    tmp = tmp_path_factory.mktemp("pax")
    asset = cache_tar(CACHE_FILES, manifest, pax={name: records_})
    seed = placed_asset(tmp, asset, manifest)
    before = set(os.listdir(tmp))
    count(figures, SURFACE, "pax_examples")
    try:
        got = prepare(seed)
    except SparkfleetError as exc:
        assert exc.exit_code == ExitCode.REFUSED and "kernel-cache.tar" in exc.message
        assert not (Path(seed.store) / hashlib.sha256(asset).hexdigest() / "tree").exists()
    else:
        listed = {str(p.relative_to(got.tree)) for p in got.tree.rglob("*") if p.is_file()}
        assert listed == {*CACHE_FILES, "cache-manifest.json"}
        for n, data in CACHE_FILES.items():
            assert (got.tree / n).read_bytes() == data
            if n in MTIME_NS and n != name:
                assert (got.tree / n).stat().st_mtime_ns == MTIME_NS[n]
    assert set(os.listdir(tmp)) == before  # nothing beside the fleet, the kit and the store
