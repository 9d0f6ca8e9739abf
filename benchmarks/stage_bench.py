#!/usr/bin/env python3
"""Staging speed, measured side by side in one run on the same bytes; prints one JSON line.

  cold:  `sparkfleet stage` (temp + fsync + verify + rename) vs `cp -a` of the same hub, and vs
         `cp -a && sync` (cp alone leaves its bytes in the page cache; we fsync every file).
  rerun: `sparkfleet stage` on a complete tree (sampled verification only) vs
         `rsync -a --checksum` on a complete tree (reads every byte on both sides).
  bound: the cold throughput as a % of the slower of source read and destination write, both
         measured on this machine in the same run (caches dropped; the write fsync'd).
  start-up: `sparkfleet --version` and importing the stage verb, each in a fresh interpreter
         (medians; bytecode cached, as an installed package has it), beside bare `python -c pass`;
         and the same rerun through the CLI in a fresh process (`rerun_cli_*`), start-up included.
Ratios > 1 mean sparkfleet is faster. Page caches are dropped before each timed step when
this runs as root (reported as `caches_dropped`); each step runs --rounds times in alternating
order after an untimed warm-up copy, and the medians are compared. This machine is small and noisy: read the
ratios, not the seconds.

Usage: python benchmarks/stage_bench.py [--gib 2.0] [--workdir DIR] [--jobs 4]
       python benchmarks/stage_bench.py --smoke   # seconds, 4 MiB: the script itself cannot rot
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

from sparkfleet.demo.hubfixture import DRAFTER_REPO, WEIGHTS_REPO, build_nas_hub  # noqa: E402
from sparkfleet.roofline.measure import largest_files, read_rate, write_rate  # noqa: E402
from sparkfleet.stage import execute  # noqa: E402
from sparkfleet.stage.plan import StageRequest  # noqa: E402


def drop_caches() -> bool:
    subprocess.run(["sync"], check=True)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/self/io")


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def fresh_process_s(argv: list[str], env: dict[str, str], runs: int) -> float:
    """Median wall time of `argv` in a fresh process (one untimed run first: it writes the bytecode)."""
    subprocess.run(argv, check=True, capture_output=True, env=env)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, env=env)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def startup(work: Path, runs: int) -> tuple[dict, dict[str, str]]:
    """Start-up alone, medians of `runs` fresh interpreters; and the env the CLI runs under here."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "SPARKFLEET_ROOT")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "python"), env.get("PYTHONPATH")]))
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")  # bytecode as installed, not in the source tree
    py = sys.executable
    figures = {
        "python_bare": fresh_process_s([py, "-c", "pass"], env, runs),
        "sparkfleet_version": fresh_process_s([py, "-m", "sparkfleet", "--version"], env, runs),
        "stage_verb_import": fresh_process_s([py, "-c", "import sparkfleet.cli.stage"], env, runs),
    }
    return {k: round(v, 3) for k, v in figures.items()}, env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=2.0, help="approximate size of the weight shards in GiB")
    ap.add_argument("--workdir", type=Path, help="where to build the trees (default: a temp dir)")
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3, help="timed repetitions, alternating order; medians")
    ap.add_argument("--startup-runs", type=int, default=10, help="fresh interpreters per start-up figure")
    ap.add_argument("--smoke", action="store_true", help="seconds: 4 MiB of shards, one round")
    args = ap.parse_args()
    if args.smoke:
        args.gib, args.rounds, args.startup_runs = 4 / 1024, 1, 3
    work = Path(tempfile.mkdtemp(prefix="stage-bench-", dir=args.workdir))
    try:
        shards = 4
        nas = build_nas_hub(work / "nas", shard_bytes=int(args.gib * 1024**3 / shards), shards=shards)
        for junk in (nas.root / ".locks", *nas.root.rglob("*.incomplete")):
            shutil.rmtree(junk) if junk.is_dir() else junk.unlink()
        ours_dest, rsync_dest = work / "ours", work / "rsync"
        requests = [
            StageRequest(nas.root, ours_dest, WEIGHTS_REPO, "main"),
            StageRequest(nas.root, ours_dest, WEIGHTS_REPO, "v0"),
            StageRequest(nas.root, ours_dest, DRAFTER_REPO, "main"),
        ]
        # The first big copy after writing the source pays for its writeback: absorb it untimed.
        subprocess.run(["cp", "-a", str(nas.root), str(work / "warmup")], check=True)
        shutil.rmtree(work / "warmup")

        def ours() -> None:
            execute.stage(requests, jobs=args.jobs)

        def cp() -> None:
            subprocess.run(["cp", "-a", str(nas.root), str(work / "cp")], check=True)

        def cp_sync() -> None:
            cp()
            subprocess.run(["sync"], check=True)

        methods = {"ours": (ours, ours_dest), "cp_a": (cp, work / "cp"), "cp_a_sync": (cp_sync, work / "cp")}
        times: dict[str, list[float]] = {name: [] for name in methods}
        sizes: dict[str, int] = {}
        dropped = False
        for round_no in range(args.rounds):
            order = list(methods) if round_no % 2 == 0 else list(reversed(methods))
            for name in order:
                fn, dest = methods[name]
                shutil.rmtree(dest, ignore_errors=True)
                dropped = drop_caches()
                times[name].append(timed(fn))
                sizes[name] = tree_bytes(dest)
        t_ours, t_cp, t_cps = (statistics.median(times[n]) for n in ("ours", "cp_a", "cp_a_sync"))
        ours_bytes, cp_bytes = sizes["ours"], sizes["cp_a"]
        # The bound on this machine, measured now: source read (cold) and destination write (fsync'd).
        drop_caches()
        size = min(ours_bytes, 1024**3)
        source = read_rate(largest_files([nas.root]), size, "source", streams=args.jobs)
        dest = write_rate(work / "bound-probe", size, "destination", streams=args.jobs)
        io_bound = min(source.value, dest.value) if source else None

        subprocess.run(["rsync", "-a", f"{nas.root}/", f"{rsync_dest}/"], check=True)
        rsync_times, rerun_times, reads = [], [], []
        for _ in range(args.rounds):
            drop_caches()
            rsync_times.append(
                timed(
                    lambda: subprocess.run(
                        ["rsync", "-a", "--checksum", f"{nas.root}/", f"{rsync_dest}/"], check=True
                    )
                )
            )
            drop_caches()
            before = rchar()
            start = time.perf_counter()
            rerun = execute.stage(requests, jobs=args.jobs)
            rerun_times.append(time.perf_counter() - start)
            reads.append(rchar() - before)
            assert rerun.ok and rerun.copied_bytes == 0
        t_rsync, t_rerun, rerun_read = (statistics.median(x) for x in (rsync_times, rerun_times, reads))
        # The same rerun as an operator types it: a fresh process, start-up included.
        start_figures, env = startup(work, args.startup_runs)
        cli = [sys.executable, "-m", "sparkfleet", "stage", "--source", str(nas.root)]
        cli += ["--dest", str(ours_dest), "--jobs", str(args.jobs), "--json"]
        for r in requests:
            cli += ["--repo", f"{r.repo}@{r.revision}"]
        cli_times = []
        for _ in range(args.rounds):
            drop_caches()
            start = time.perf_counter()
            proc = subprocess.run(cli, capture_output=True, text=True, env=env)
            cli_times.append(time.perf_counter() - start)
            if proc.returncode != 0:
                raise SystemExit(f"the CLI rerun failed ({proc.returncode}): {proc.stderr[-2000:]}")
        t_cli = statistics.median(cli_times)
        result = {
            "bench": "stage",
            "caches_dropped": dropped,
            "bytes_ours": ours_bytes,
            "bytes_cp": cp_bytes,
            "cold_throughput_vs_cp": round((ours_bytes / t_ours) / (cp_bytes / t_cp), 3),
            "cold_throughput_vs_cp_sync": round((ours_bytes / t_ours) / (cp_bytes / t_cps), 3),
            "cold_goal": ">= 0.9 vs cp -a",
            "cold_pct_of_io_bound": round(100 * ours_bytes / t_ours / io_bound, 1) if io_bound else None,
            "cp_a_sync_pct_of_io_bound": round(100 * cp_bytes / t_cps / io_bound, 1) if io_bound else None,
            "io_bound_binding": None
            if not io_bound
            else ("source read" if source.value <= dest.value else "destination write"),
            "rerun_speedup_vs_rsync_checksum": round(t_rsync / t_rerun, 1),
            "rerun_goal": ">= 20x",
            "rerun_bytes_read": rerun_read,
            "rerun_bytes_read_fraction": round(rerun_read / ours_bytes, 5),
            "rerun_cli_speedup_vs_rsync_checksum": round(t_rsync / t_cli, 1),
            "startup_s": start_figures,
            "startup_goal": "rerun_cli - ours_rerun (start-up) <= 0.15 s",
            "rerun_cli_startup_s": round(t_cli - t_rerun, 3),
            "seconds_median": {
                "ours_cold": round(t_ours, 3),
                "cp_a": round(t_cp, 3),
                "cp_a_sync": round(t_cps, 3),
                "ours_rerun": round(t_rerun, 3),
                "rsync_checksum_rerun": round(t_rsync, 3),
                "ours_rerun_cli": round(t_cli, 3),
            },
            "source_read_mb_s": round(source.value / 1e6, 1) if source else None,
            "dest_write_mb_s": round(dest.value / 1e6, 1),
            "rounds": args.rounds,
            "smoke": args.smoke,
            "jobs": args.jobs,
            "cpus": os.cpu_count(),
        }
        print(json.dumps(result))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
