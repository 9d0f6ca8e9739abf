"""Every benchmark runs at --smoke and prints the keys the docs quote from it.

Why: `benchmarks/fanout_bench.py` crashed before its first row for weeks after a change to
`stage/remote.serving`, because nothing ran it, so the README's fan-out table could not be made
again from main. Here each script runs as an operator runs it (a subprocess, `--smoke`): exit 0 and
one JSON line carrying every key `docs/benchmarks.md` lists for it. A script that cannot run on
this machine says why on its JSON line and exits 2; the test skips with that reason.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
INDEX = REPO / "docs" / "benchmarks.md"
ROW = re.compile(r"^\| `(?P<script>[\w.]+\.py)` \| [^|]* \| (?P<keys>[^|]*) \| (?P<docs>[^|]*) \|$")
KEY = re.compile(r"`(?P<key>[^`]+)`(?P<cuda> \(CUDA\))?")
LINK = re.compile(r"\]\((?P<doc>[\w.-]+\.md)\)")


def index() -> dict[str, dict[str, Any]]:
    """docs/benchmarks.md's table: per script, the keys to check at --smoke and the docs quoting it."""
    rows = {}
    for line in INDEX.read_text().splitlines():
        m = ROW.match(line.strip())
        if m:
            keys = [k["key"] for k in KEY.finditer(m["keys"]) if not k["cuda"]]
            docs = [d["doc"] for d in LINK.finditer(m["docs"])]
            rows[m["script"]] = {"keys": keys, "docs": docs}
    return rows


def lookup(doc: Any, path: str, at: str = "") -> list[str]:
    """The parts of `path` (`a.b`, `a[].b`) missing from `doc`, as full paths (empty: all there)."""
    head, _, rest = path.partition(".")
    name = head.removesuffix("[]")
    if not isinstance(doc, dict) or name not in doc:
        return [f"{at}{path}"]
    value = doc[name]
    if head.endswith("[]"):
        if not isinstance(value, list) or not value:
            return [f"{at}{name}[] (empty or not a list)"]
        if not rest:
            return []
        return [m for i, item in enumerate(value) for m in lookup(item, rest, f"{at}{name}[{i}].")]
    return lookup(value, rest, f"{at}{name}.") if rest else []


def run_smoke(script: str) -> dict[str, Any]:
    path = os.pathsep.join(filter(None, [str(REPO / "python"), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), "--smoke"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=600,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    last = json.loads(lines[-1]) if lines else None
    if proc.returncode == 2 and last and str(last.get("error", "")).startswith("cannot run here"):
        pytest.skip(f"{script}: {last['error']}")
    assert proc.returncode == 0, f"{script} --smoke exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    assert len(lines) == 1, f"{script} --smoke printed {len(lines)} JSON lines:\n{proc.stdout[-2000:]}"
    return last


def test_every_benchmark_script_has_a_row_in_the_index():
    scripts = sorted(p.name for p in (REPO / "benchmarks").glob("*.py"))
    assert scripts and sorted(index()) == scripts


@pytest.mark.parametrize("script", sorted(index()))
def test_the_docs_a_row_names_still_describe_its_script(script):
    row = index()[script]
    assert row["keys"], f"{script}: no keys listed"
    assert row["docs"], f"{script}: no doc named"
    for doc in row["docs"]:
        text = (REPO / "docs" / doc).read_text()
        assert f"benchmarks/{script}" in text, f"docs/{doc} no longer names {script}"


def test_the_key_lookup_reports_what_is_missing():
    doc = {"a": {"b": 1}, "rows": [{"x": 1}, {"y": 2}], "empty": []}
    assert lookup(doc, "a.b") == []
    assert lookup(doc, "a.c") == ["a.c"]
    assert lookup(doc, "rows[].x") == ["rows[1].x"]
    assert lookup(doc, "empty[].x") == ["empty[] (empty or not a list)"]


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(index()))
def test_a_smoke_run_completes_and_prints_every_quoted_key(script):
    out = run_smoke(script)
    missing = [m for key in index()[script]["keys"] for m in lookup(out, key)]
    assert missing == [], f"{script} --smoke: missing {missing}"
