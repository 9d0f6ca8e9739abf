"""Hostile input to the options and files added to make every verb report and every verify say
what it read, each judged by an oracle written here:

* `inventory show`: a recipe description with terminal escapes and control characters (a fleet
  checkout can come from anyone) never reaches the terminal raw; `--json` keeps it exactly.
* `demo --json`, `demo --shard-mib`: a shard size that is no size, a foreign --workdir with
  --fresh, are usage errors (exit 2, JSON on stdout with --json), no traceback, nothing removed.
* the staging record (`.locks/sparkfleet-staged/<repo>/<commit>.json`, stage/staged.py): any planted JSON
  value never breaks `verify`, and never hides a difference the sampled check sees by itself.
* the launch lock (`recipes/<lane>/generations/.launch.lock`): a planted link is refused (exit 5),
  never followed; the file it points at keeps its bytes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from sparkfleet.base.digests import sample_offsets
from sparkfleet.base.errors import ExitCode
from sparkfleet.base.sanitize import clean
from sparkfleet.cli import main
from sparkfleet.demo.fleet import DEMO_LANE, WEIGHTS_REPO, write_demo_fleet
from sparkfleet.facts.hubcache import repo_folder
from sparkfleet.stage import execute, staged
from sparkfleet.stage.targets import requests_for_host

from .tally import bad_input, count

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def _toml_str(text: str) -> str:
    """A TOML basic string holding exactly `text` (control characters escaped as \\uXXXX)."""
    out = []
    for ch in text:
        out.append(f"\\u{ord(ch):04x}" if ch in '"\\' or ord(ch) < 0x20 or ord(ch) == 0x7F else ch)
    return '"' + "".join(out) + '"'


# ---- inventory show -------------------------------------------------------------------------------

ESCAPES = st.sampled_from(["\x1b]0;owned\x07", "\x1b[2J", "\x1b[31m", "\x9b31m", "\x07", "\r", "\x1bP1$r"])


@pytest.fixture(scope="module")
def small_fleet(tmp_path_factory) -> Path:
    return write_demo_fleet(tmp_path_factory.mktemp("show"), shard_bytes=16 * 1024).root


@pytest.mark.surface("cli:inventory show", "cli:inventory show --json")
@given(before=st.text(max_size=20), escape=ESCAPES, after=st.text(max_size=20))
def test_escapes_in_a_description_never_reach_the_terminal_raw(small_fleet, figures, before, escape, after):
    recipe = small_fleet / "recipes" / DEMO_LANE / "recipe.toml"
    text = recipe.read_text()
    start = text.index("description = ")
    end = text.index("\n", start)
    description = before + escape + after
    recipe.write_text(text[:start] + f"description = {_toml_str(description)}" + text[end:])
    shown = run("--root", str(small_fleet), "inventory", "show")
    if shown.exit_code == ExitCode.USAGE:  # the schema refused the text: also a clean answer
        assert "Traceback" not in shown.output
        return
    assert shown.exit_code == ExitCode.OK, shown.output
    raw = [c for c in shown.output if c != "\n" and (ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F)]
    bad_input(figures, "cli:inventory show", refused=not raw)  # the oracle: it holds an escape
    assert raw == []
    doc = json.loads(run("--root", str(small_fleet), "inventory", "show", "--json").output)
    assert doc["lanes"][DEMO_LANE]["description"] == description  # JSON keeps it exactly (escaped)
    assert clean(description) != description  # the control: the input was hostile


# ---- demo --json, --shard-mib ---------------------------------------------------------------------


@pytest.mark.surface("cli:demo --shard-mib", "cli:demo --json")
@pytest.mark.parametrize("size", ["0", "-1", "1e9", "nan", "999999999999"])
def test_a_shard_size_that_is_no_size_is_a_usage_error(tmp_path, figures, size):
    done = CliRunner().invoke(main, ["demo", "--workdir", str(tmp_path / "w"), "--shard-mib", size, "--json"])
    bad_input(figures, "cli:demo --shard-mib", refused=done.exit_code == ExitCode.USAGE)
    assert done.exit_code == ExitCode.USAGE, done.output
    doc = json.loads(done.stdout)
    assert doc["code"] == ExitCode.USAGE and "--shard-mib" in doc["error"]
    assert not (tmp_path / "w").exists()  # nothing was written


@pytest.mark.surface("cli:demo --json", "cli:demo --fresh")
def test_demo_json_refusing_a_foreign_workdir_is_one_json_document(tmp_path, figures):
    (tmp_path / "precious.txt").write_text("keep")
    done = CliRunner().invoke(main, ["demo", "--workdir", str(tmp_path), "--fresh", "--json"])
    bad_input(figures, "cli:demo --json", refused=done.exit_code == ExitCode.USAGE)
    assert done.exit_code == ExitCode.USAGE
    doc = json.loads(done.stdout)
    assert set(doc) == {"error", "hint", "code"} and "not written by `sparkfleet demo`" in doc["error"]
    assert (tmp_path / "precious.txt").read_text() == "keep"


# ---- the staging record ---------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=20,
)


@pytest.fixture(scope="module")
def staged_host(tmp_path_factory):
    fleet = write_demo_fleet(tmp_path_factory.mktemp("record"), shard_bytes=2 * 1024 * 1024)
    from sparkfleet.fleet import inventory

    requests = requests_for_host(inventory.load(fleet.root), "dgx1", DEMO_LANE)
    assert execute.stage(requests).ok
    return fleet, requests


@pytest.mark.surface("file:staged record", "cli:verify --full", "cli:stage --full")
@given(planted=JSON, files=st.dictionaries(st.text(max_size=30), JSON, max_size=4))
def test_a_planted_staging_record_never_breaks_verify_nor_hides_what_sampling_sees(
    staged_host, figures, planted, files
):
    fleet, requests = staged_host
    hub = fleet.local_hub("dgx1")
    scan_dir = repo_folder(WEIGHTS_REPO)
    commit = next(r for r in execute.verify(requests) if r.repo == WEIGHTS_REPO).commit
    record = staged.record_path(hub, scan_dir, commit)
    blob = Path(os.path.realpath(next((hub / scan_dir / "snapshots" / commit).glob("model-00001*"))))
    original = blob.read_bytes()
    forged = {**{"schema": staged.SCHEMA, "commit": commit}, "files": files, "x": planted}
    try:
        # a byte changed inside the first sample window: the sampled check sees it with no record
        with open(blob, "r+b") as fh:
            offset = sample_offsets(len(original))[1] + 3
            fh.seek(offset)
            fh.write(bytes([original[offset] ^ 0xFF]))
        rel = str(blob.relative_to(hub))
        forged["files"] = {**files, rel: list(staged.identity(blob) or ())}  # claims: unchanged
        for doc in (planted, forged):
            record.write_text(json.dumps(doc))
            reports = execute.verify(requests)  # must not raise, whatever the record holds
            weights = next(r for r in reports if r.repo == WEIGHTS_REPO)
            bad_input(figures, "file:staged record", refused=weights.mismatches == 1)
            assert weights.mismatches == 1 and not weights.ok
    finally:
        blob.write_bytes(original)
        assert execute.stage(requests).ok  # re-recorded for the next example
    count(figures, "file:staged record", "examples")


# ---- the launch lock ------------------------------------------------------------------------------


@pytest.mark.surface("file:launch lock")
def test_a_planted_link_at_the_launch_lock_is_refused_not_followed(tmp_path, figures):
    fleet = write_demo_fleet(tmp_path / "demo", shard_bytes=16 * 1024)
    victim = tmp_path / "victim.txt"
    victim.write_text("the operator's file")
    lock = fleet.root / "recipes" / DEMO_LANE / "generations" / ".launch.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.symlink_to(victim)
    done = run("--root", str(fleet.root), "launch", DEMO_LANE)
    bad_input(figures, "file:launch lock", refused=done.exit_code == ExitCode.REFUSED)
    assert done.exit_code == ExitCode.REFUSED, done.output
    assert "symbolic link" in done.output and "Traceback" not in done.output
    assert victim.read_text() == "the operator's file"
