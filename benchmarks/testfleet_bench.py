#!/usr/bin/env python3
"""Test modules' wall time before and after a change, side by side in one run; prints one JSON line.

The "before" tests are `git archive REV` (all but python/) unpacked in a temp dir; the "after"
tests are this checkout's. Both run against this checkout's package (the change measured is the
tests' own: shared fleets, fewer hosts built), with the same pytest, alternating before/after each
round so the machine's load falls on both alike. Reported per module: each side's wall seconds,
passed/failed counts, and the ratio of the medians (before / after: > 1 means the change is faster).
This machine is small, shared and noisy: read the ratios, not the seconds.

`--workers N` runs the "after" side as `make test` does: N pytest-xdist workers (`-n N --dist
loadgroup`, tests marked `serial` left out), then the `serial` tests alone. `--together` runs all the
named modules in one pytest per side (one row, "together"): the suite's parallel run measured like
for like against the serial one it replaces.

Usage: python benchmarks/testfleet_bench.py --before REV [--rounds 1] [--workers N [--together]] MODULE...
       python benchmarks/testfleet_bench.py --smoke   (one quick module, one round: that it runs)
"""

from __future__ import annotations

import argparse
import io
import json
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SMOKE_MODULE = "tests/lane/test_launch_spec.py"  # present before and after, seconds, no root


def unpack(rev: str, dest: Path) -> Path:
    """The tree of `rev` under `dest`, all but its package (tests read the repo's hosts/, recipes/...)."""
    tar = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        members = [m for m in t.getmembers() if not m.name.startswith("python/")]
        t.extractall(dest, members=members, filter="data")
    return dest


def run(where: Path, modules: list[str], workers: int = 0) -> dict:
    """One side: plain pytest, or (workers) make test's two passes: `-m "not serial"` on the workers,
    then the `serial` tests alone; wall seconds and counts are the sums of both."""
    passes = [[]]
    if workers:
        passes = [["-n", str(workers), "--dist", "loadgroup", "-m", "not serial"], ["-m", "serial"]]
    out: dict = {"wall_s": 0.0}
    for extra in passes:
        start = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, *modules],
            cwd=where, capture_output=True, text=True,
        )  # fmt: skip
        out["wall_s"] = round(out["wall_s"] + time.monotonic() - start, 2)
        tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
        for n, k in re.findall(r"(\d+) (passed|failed|skipped|error)", tail):
            out[k] = out.get(k, 0) + int(n)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("modules", nargs="*")
    ap.add_argument("--before", default="HEAD", help="the revision whose tests are 'before'")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--workers", type=int, default=0, help="pytest-xdist workers for the after side")
    ap.add_argument("--together", action="store_true", help="all modules in one pytest per side")
    a = ap.parse_args()
    modules = [SMOKE_MODULE] if a.smoke else a.modules
    if not modules:
        ap.error("name at least one test module (or --smoke)")
    out: dict = {"before": a.before, "rounds": 1 if a.smoke else a.rounds, "workers": a.workers,
                 "modules": {}}  # fmt: skip
    runs = {"together": modules} if a.together else {m: [m] for m in modules}
    with tempfile.TemporaryDirectory(prefix="sf-testbench-") as tmp:
        before_root = unpack(a.before, Path(tmp))
        for name, argv in runs.items():
            sides: dict[str, list[dict]] = {"before": [], "after": []}
            for _ in range(out["rounds"]):
                sides["before"].append(run(before_root, argv))
                sides["after"].append(run(REPO, argv, a.workers))
            med = {k: statistics.median(r["wall_s"] for r in v) for k, v in sides.items()}
            out["modules"][name] = {**sides, "ratio": round(med["before"] / med["after"], 3)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
