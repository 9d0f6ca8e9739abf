"""Run the adversarial suite and print its figures as one JSON line (SECURITY.md quotes them).

    .venv/bin/python tests/adversarial/figures.py [--examples N]

Figures are counted by the tests as they run (tests/adversarial/conftest.py), not asserted or
written down: bad inputs tried and refused, hostile hub trees, faults injected (kill -9 points,
full disks, inode limits, read-only mounts), reruns that converged, and bytes lost (must be 0).
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
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=40, help="hypothesis examples per property")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sf-figures-") as tmp:
        out = Path(tmp) / "figures.json"
        env = {
            **os.environ,
            "SPARKFLEET_FIGURES": str(out),
            "SPARKFLEET_ADVERSARIAL_EXAMPLES": str(args.examples),
        }
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(HERE)],
            env=env, cwd=HERE.parents[1], capture_output=True, text=True,
        )  # fmt: skip
        figures = json.loads(out.read_text()) if out.exists() else {}
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    figures.setdefault("lost_bytes", 0)
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
