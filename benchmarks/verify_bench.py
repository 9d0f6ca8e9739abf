#!/usr/bin/env python3
"""What `verify` costs, and what it sees, with and without the staging record; one JSON line.

A hub is staged once; then, side by side on the same tree (page caches dropped before each timed
step when this runs as root, medians of --rounds alternating rounds):

  sampled:    the default verify with the staging record (stage/staged.py): sample windows,
              plus one stat per file to tell which files changed since staging;
  unrecorded: the same without the record (the sampled windows alone);
  full:       `--full`, every byte.

Then one byte is changed between the sample windows of the largest file, through the filesystem,
and each mode is asked again: `sampled_finds_change` (the record makes the default read that file
whole), `unrecorded_finds_change` (the windows alone: expected false), `full_finds_change`, and
`sampled_after_change_s` (what the default costs when one file changed: one file read whole).
Ratios: `sampled_vs_full` (< 1: the default is that fraction of a full read's time) and
`record_overhead` (sampled / unrecorded: what the stat per file adds).

Usage: python benchmarks/verify_bench.py [--mib 2048] [--rounds 3] [--workdir DIR]
       python benchmarks/verify_bench.py --smoke   # seconds, tiny: the script itself cannot rot
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

from stage_bench import drop_caches  # noqa: E402  (the one way the benchmarks drop the page cache)

from sparkfleet.base.digests import WINDOW, sample_offsets  # noqa: E402
from sparkfleet.demo.hubfixture import WEIGHTS_REPO, build_nas_hub  # noqa: E402
from sparkfleet.stage import execute, staged  # noqa: E402
from sparkfleet.stage.plan import StageRequest  # noqa: E402


def verify_s(request: StageRequest, mode: str) -> tuple[float, bool]:
    """(seconds, ok) of one verify of `request` in `mode`, caches dropped first where allowed."""
    drop_caches()
    start = time.perf_counter()
    (report,) = execute.verify([request], mode)
    return time.perf_counter() - start, report.ok


def hide_record(dest: Path) -> list[tuple[Path, Path]]:
    moved = []
    for record in (dest / staged.FOLDER).rglob("*.json"):
        aside = record.with_suffix(".aside")
        record.rename(aside)
        moved.append((aside, record))
    return moved


def restore(moved: list[tuple[Path, Path]]) -> None:
    for aside, record in moved:
        aside.rename(record)


def run(mib: int, rounds: int, workdir: Path) -> dict:
    nas = build_nas_hub(workdir / "nas", shard_bytes=max(1, mib // 4) * 1024 * 1024)
    dest = workdir / "local"
    request = StageRequest(nas.root, dest, WEIGHTS_REPO, "main", (), ("page15/*",))
    assert execute.stage([request]).ok
    times: dict[str, list[float]] = {"sampled": [], "unrecorded": [], "full": []}
    for _ in range(rounds):  # alternating, so that drift in the machine's load hits each alike
        times["sampled"].append(verify_s(request, "sample")[0])
        moved = hide_record(dest)
        times["unrecorded"].append(verify_s(request, "sample")[0])
        restore(moved)
        times["full"].append(verify_s(request, "full")[0])
    med = {k: statistics.median(v) for k, v in times.items()}
    files = [p for p in dest.rglob("*") if p.is_file() and not p.is_symlink() and ".locks" not in p.parts]
    biggest = max(files, key=lambda p: p.stat().st_size)
    offsets = sample_offsets(biggest.stat().st_size)
    between = offsets[3] + WINDOW + (offsets[4] - offsets[3] - WINDOW) // 2
    with open(biggest, "r+b") as fh:
        fh.seek(between)
        byte = fh.read(1)
        fh.seek(between)
        fh.write(bytes([byte[0] ^ 1]))
    after_s, sampled_ok = verify_s(request, "sample")
    moved = hide_record(dest)
    _, unrecorded_ok = verify_s(request, "sample")
    restore(moved)
    _, full_ok = verify_s(request, "full")
    return {
        "bench": "verify",
        "files": len(files),
        "bytes": sum(p.stat().st_size for p in files),
        "rounds": rounds,
        "caches_dropped": drop_caches(),
        "sampled_s": round(med["sampled"], 4),
        "unrecorded_s": round(med["unrecorded"], 4),
        "full_s": round(med["full"], 4),
        "sampled_vs_full": round(med["sampled"] / med["full"], 4),
        "record_overhead": round(med["sampled"] / med["unrecorded"], 3),
        "sampled_after_change_s": round(after_s, 4),
        "sampled_finds_change": not sampled_ok,
        "unrecorded_finds_change": not unrecorded_ok,
        "full_finds_change": not full_ok,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=2048, help="weights in the hub, MiB (4 shards)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true", help="tiny and once: does the script still run")
    args = ap.parse_args()
    mib, rounds = (8, 1) if args.smoke else (args.mib, args.rounds)
    workdir = Path(tempfile.mkdtemp(prefix="verify-bench-", dir=args.workdir))
    try:
        print(json.dumps(run(mib, rounds, workdir)))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
