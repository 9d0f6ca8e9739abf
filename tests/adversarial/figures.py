"""Run the adversarial suite and print its figures as one JSON line (SECURITY.md quotes them).

    .venv/bin/python tests/adversarial/figures.py [--examples N] [-k EXPR]

Figures are counted by the tests as they run (tests/adversarial/conftest.py, rules in tally.py),
not asserted or written down, per surface: bad inputs that the test's own oracle knows are bad
and how many were refused, faults that actually failed something (kill -9 points, full disks,
inode limits, read-only mounts), reruns that converged, and bytes lost — measured by comparing
every final file against its source after every fault, and printed as "not measured" where no
comparison was made (never a 0 that nobody counted).
Needs root for the tmpfs mounts; without it those tests skip and their figures are absent.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
NOT_MEASURED = "not measured"
# metric -> the metric counting how often it was measured
MEASURED_BY = {"lost_bytes": "lost_bytes_checks", "partial_bytes": "partial_bytes_checks"}


def summarize(counts: dict[str, int]) -> dict[str, Any]:
    """Per-surface figures and their totals; a byte count never measured reads "not measured".

    Keys are "surface/metric"; a key without a surface (a test not yet labelled) is reported
    under "unlabelled", so it is still seen.
    """
    surfaces: dict[str, Counter] = {}
    for key, n in counts.items():
        surface, _, metric = key.rpartition("/")
        surfaces.setdefault(surface or "unlabelled", Counter())[metric] += n
    totals: Counter = Counter()
    for figures in surfaces.values():
        totals.update(figures)

    def shown(figures: Counter) -> dict[str, Any]:
        out: dict[str, Any] = dict(sorted(figures.items()))
        for metric, checks in MEASURED_BY.items():
            out[metric] = figures.get(metric, 0) if figures.get(checks) else NOT_MEASURED
        return out

    return {"surfaces": {s: shown(f) for s, f in sorted(surfaces.items())}, "totals": shown(totals)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=40, help="hypothesis examples per property")
    parser.add_argument("-k", dest="select", help="only the tests pytest -k selects")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sf-figures-") as tmp:
        out = Path(tmp) / "figures.json"
        env = {
            **os.environ,
            "SPARKFLEET_FIGURES": str(out),
            "SPARKFLEET_ADVERSARIAL_EXAMPLES": str(args.examples),
        }
        started = time.monotonic()
        select = ["-k", args.select] if args.select else []
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *select, str(HERE)],
            env=env, cwd=HERE.parents[1], capture_output=True, text=True,
        )  # fmt: skip
        counts = json.loads(out.read_text()) if out.exists() else {}
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    figures = summarize(counts)
    figures.update(
        pytest_exit=proc.returncode,
        pytest_summary=summary,
        seconds=round(time.monotonic() - started, 1),
        hypothesis_examples=args.examples,
    )
    print(json.dumps(figures, sort_keys=True))
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-2000:])
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
