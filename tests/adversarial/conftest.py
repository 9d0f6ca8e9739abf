"""The adversarial suite's shared parts: hypothesis settings and the figures it produces.

Every test here counts, per surface, what it tried (`bad_inputs`), what it broke on purpose
(`faults`), and what was lost (`lost_bytes`, with `lost_bytes_checks` saying how often it was
measured) — see tally.py for the rules that keep these figures able to fail. With
$SPARKFLEET_FIGURES set, the counts are written there at the end of the session;
`tests/adversarial/figures.py` runs the suite that way and prints them per surface (SECURITY.md
quotes its output).

Each case names the surfaces it attacks with `@pytest.mark.surface(id, ...)`, so the suite can say
which surfaces taking outside input have a hostile case and which have none. The id forms:

* `cli:VERB [SUB] [--option]` - a verb, or one of its options or the file it names
  (`cli:keys add --out`, `cli:demo --workdir`);
* `agent:ACTION` - a node agent action (`agent:probe`);
* `http:SERVER METHOD PATH` - a path a served API exposes (`http:gateway POST /workers`);
* `file:WHAT` - a file sparkfleet reads that someone else wrote (`file:kit bundle-manifest.json`).
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


@pytest.fixture
def figures() -> Counter:
    return FIGURES


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("SPARKFLEET_FIGURES")
    if out and FIGURES:
        Path(out).write_text(json.dumps(dict(FIGURES), sort_keys=True))
