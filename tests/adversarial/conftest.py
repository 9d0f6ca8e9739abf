"""The adversarial suite's shared parts: hypothesis settings and the figures it produces.

Every test here counts, per surface, what it tried (`bad_inputs`), what it broke on purpose
(`faults`), and what was lost (`lost_bytes`, with `lost_bytes_checks` saying how often it was
measured) — see tally.py for the rules that keep these figures able to fail. With
$SPARKFLEET_FIGURES set, the counts are written there at the end of the session, with each test's
surfaces, outcome and the counts it added; `tests/adversarial/figures.py` runs the suite that way
and prints them per surface (and writes SECURITY.md's table with `--write`).

Each case names the surfaces it attacks with `@pytest.mark.surface(id, ...)`, so the suite can say
which surfaces taking outside input have a hostile case and which have none. The id forms:

* `cli:VERB [SUB] [--option]` - a verb, or one of its options or the file it names
  (`cli:keys add --out`, `cli:demo --workdir`);
* `agent:ACTION` - a node agent action (`agent:probe`);
* `http:SERVER METHOD PATH` - a path a served API exposes (`http:gateway POST /workers`);
* `file:WHAT` - a file sparkfleet reads that someone else wrote (`file:kit bundle-manifest.json`).

surfaces.py lists every surface the code has; test_surface_coverage.py fails while one has no
case, or a mark names an id the list does not have. With $SPARKFLEET_SURFACE_MARKS set, the
collected marks are written there (that test collects the suite that way).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Small-ish and without deadlines: the machine is shared and slow; the point is breadth, not depth.
settings.register_profile(
    "adversarial",
    max_examples=int(os.environ.get("SPARKFLEET_ADVERSARIAL_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,  # the same examples every run: the figures are reproducible
    database=None,  # nothing written into the checkout
)
settings.load_profile("adversarial")

FIGURES: Counter = Counter()
# nodeid -> {"surfaces": [...], "outcome": passed|failed|skipped, "counts": what the test added}
TESTS: dict[str, dict] = {}


@pytest.fixture
def figures() -> Counter:
    return FIGURES


def surface_ids(item: pytest.Item) -> list[str]:
    return [sid for mark in item.iter_markers("surface") for sid in mark.args]


def pytest_collection_finish(session: pytest.Session) -> None:
    out = os.environ.get("SPARKFLEET_SURFACE_MARKS")
    if out:
        marks = {item.nodeid: surface_ids(item) for item in session.items}
        Path(out).write_text(json.dumps(marks, sort_keys=True))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    before = Counter(FIGURES)
    yield
    TESTS.setdefault(item.nodeid, {})["counts"] = dict(FIGURES - before)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or report.outcome != "passed":  # a failed or skipped setup counts too
        entry = TESTS.setdefault(report.nodeid, {})
        if entry.get("outcome") in (None, "passed"):
            entry["outcome"] = report.outcome


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        TESTS.setdefault(item.nodeid, {})["surfaces"] = surface_ids(item)


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("SPARKFLEET_FIGURES")
    if out:
        doc = {"counts": dict(FIGURES), "tests": {k: v for k, v in TESTS.items() if "outcome" in v}}
        Path(out).write_text(json.dumps(doc, sort_keys=True))
