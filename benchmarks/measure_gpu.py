"""`sparkfleet measure` on a real GPU against a reference measured the same way in the same run.

For each run: the CLI as an operator starts it, in a fresh process (`python -m sparkfleet --root
FLEET measure HOST --json`, this machine named HOST through SPARKFLEET_HOST), on a throwaway fleet
whose host kind declares the GPU's datasheet figures; then, in this process, the reference the
issue names: 3 warm-ups, then 20 iterations timed with one pair of CUDA events, for a
device-to-device copy of a 4 GiB buffer (bytes read + written) and a bf16 8192^3 matmul on random
data. The reference is written here from torch alone, not from sparkfleet's code. Prints one JSON
line: per run the CLI's figures, the reference's, their ratio (and the ratio of sparkfleet's
earlier method, without warm-up, run the same way), whether every ratio of every run is within 5 %, and
the warnings the CLI prints when the same GPU is declared a GB10 (measured far above declared).

    PYTHONPATH=python python3 benchmarks/measure_gpu.py [--runs 3]
    PYTHONPATH=python python3 benchmarks/measure_gpu.py --smoke   # no GPU: the CLI's CPU path only

Without a CUDA device (and without --smoke) it says so and exits 2.
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

HOST = "gpu0"
COPY_BYTES = 4 * 1024**3
SIDE = 8192
WARMUPS, ITERATIONS = 3, 20
TOLERANCE = 0.05

# The H200 SXM's datasheet figures (NVIDIA H200 Tensor Core GPU datasheet): 4.8 TB/s HBM3e;
# 1,979 TFLOP/s bf16 with 2:4 sparsity, so 989 dense. The CLI warns outside 25-150 % of these.
FLEET = """schema_version = 1
[defaults]
ssh_user = "nobody"
local_hub = "{root}/hub"
nas_hub = "{root}/nas"
kind = "{kind}"
[hosts.{host}]
address = "{host}"
[host_kinds.h200]
description = "NVIDIA H200 SXM, 141 GB HBM3e"
memory_bandwidth = {{ value = 4800, unit = "GB/s", source = "NVIDIA H200 datasheet: 4.8 TB/s" }}
peak_bf16 = {{ value = 989, unit = "TFLOP/s", source = "NVIDIA H200 datasheet: 1,979 sparse, half dense" }}
[host_kinds.gb10]
description = "NVIDIA DGX Spark, as hosts/fleet.toml declares it"
memory_bandwidth = {{ value = 273, unit = "GB/s", source = "NVIDIA DGX Spark product page" }}
peak_bf16 = {{ value = 125, unit = "TFLOP/s", source = "derived: half the FP8 rate" }}
[host_kinds.cpu]
description = "a machine without a GPU (smoke)"
memory_bandwidth = {{ unit = "GB/s", source = "none" }}
"""


def fleet(root: Path, kind: str) -> None:
    (root / "hosts").mkdir(parents=True)
    (root / "hub").mkdir()
    (root / "nas").mkdir()
    (root / "hosts" / "fleet.toml").write_text(FLEET.format(root=root, host=HOST, kind=kind))


def cli_measure(root: Path, quick: bool) -> tuple[dict, str, float]:
    """The CLI in a fresh process, as an operator runs it; its JSON, its warnings, its wall time."""
    argv = [sys.executable, "-m", "sparkfleet", "--root", str(root), "measure", HOST, "--json"]
    env = {**os.environ, "SPARKFLEET_HOST": HOST}
    start = time.perf_counter()
    cp = subprocess.run(argv + (["--quick"] if quick else []), capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if cp.returncode != 0:
        raise SystemExit(f"sparkfleet measure failed ({cp.returncode}): {cp.stderr.strip()[-2000:]}")
    return json.loads(cp.stdout), cp.stderr.strip(), seconds


# sparkfleet's gpu_rates() without warm-up (python/sparkfleet/roofline/measure.py at 6cf4cec), run
# the same way, in a fresh process: the first 5 copies and 10 matmuls, wall clock, no warm-up.
OLD_METHOD = """
import json, time, torch
out = {}
a = torch.empty(1 << 28, dtype=torch.bfloat16, device="cuda"); b = torch.empty_like(a)
torch.cuda.synchronize(); start = time.perf_counter()
for _ in range(5): b.copy_(a)
torch.cuda.synchronize(); out["memory_bandwidth"] = 5 * 2 * a.numel() * 2 / (time.perf_counter() - start)
m = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
torch.cuda.synchronize(); start = time.perf_counter()
for _ in range(10): m @ m
torch.cuda.synchronize(); out["peak_bf16"] = 10 * 2 * 8192**3 / (time.perf_counter() - start)
print(json.dumps(out))
"""


def old_method() -> dict[str, float]:
    cp = subprocess.run([sys.executable, "-c", OLD_METHOD], capture_output=True, text=True, check=True)
    return json.loads(cp.stdout)


def reference(torch) -> dict[str, float]:
    """3 warm-ups, 20 iterations between two CUDA events: copy B/s (read + write) and bf16 FLOP/s."""

    def timed(step) -> float:
        for _ in range(WARMUPS):
            step()
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(ITERATIONS):
            step()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1000 / ITERATIONS

    def copy_s() -> float:
        a = torch.zeros(COPY_BYTES // 2, dtype=torch.bfloat16, device="cuda")
        b = torch.empty_like(a)
        return timed(lambda: b.copy_(a))

    def mm_s() -> float:
        x = torch.randn(SIDE, SIDE, dtype=torch.bfloat16, device="cuda")
        y = torch.randn(SIDE, SIDE, dtype=torch.bfloat16, device="cuda")
        return timed(lambda: x @ y)

    copy, mm = copy_s(), mm_s()
    torch.cuda.empty_cache()
    return {"memory_bandwidth": 2 * COPY_BYTES / copy, "peak_bf16": 2 * SIDE**3 / mm}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="no GPU needed: run the CLI's CPU path once")
    args = ap.parse_args()
    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:
        torch, cuda = None, False
    if not cuda and not args.smoke:
        print(json.dumps({"ok": False, "reason": "no CUDA device here: run on a GPU host, or --smoke"}))
        return 2
    out: dict = {"device": torch.cuda.get_device_name() if cuda else "cpu", "runs": []}
    for _ in range(1 if args.smoke else args.runs):
        with tempfile.TemporaryDirectory(prefix="sparkfleet-measure-gpu-") as tmp:
            root = Path(tmp)
            fleet(root, "h200" if cuda else "cpu")
            found, warnings, seconds = cli_measure(root, quick=args.smoke)
        run = {
            "cli_seconds": round(seconds, 2),
            "cli": {n: m["value"] for n, m in found.items()},
            "cli_spread": {n: m.get("spread") for n, m in found.items()},
            "cli_warnings": warnings.splitlines(),
        }
        if cuda:
            ref = reference(torch)
            run["reference"] = ref
            run["ratio"] = {n: round(found[n]["value"] / ref[n], 4) for n in ref if n in found}
            old = old_method()
            run["old_method_ratio"] = {n: round(old[n] / ref[n], 4) for n in ref}
        out["runs"].append(run)
    if cuda:  # the same GPU declared as a GB10 (273 GB/s, 125 TFLOP/s): the CLI must say so
        with tempfile.TemporaryDirectory(prefix="sparkfleet-measure-gpu-") as tmp:
            fleet(Path(tmp), "gb10")
            _, warnings, _ = cli_measure(Path(tmp), quick=True)
        out["declared_gb10_warnings"] = warnings.splitlines()
    if cuda:
        ratios = [r for run in out["runs"] for r in run["ratio"].values()]
        complete = all(len(run["ratio"]) == 2 for run in out["runs"])
        out["worst_ratio"] = max(ratios, key=lambda r: abs(r - 1)) if ratios else None
        warned = " ".join(out["declared_gb10_warnings"])
        out["ok"] = (
            complete
            and all(abs(r - 1) <= TOLERANCE for r in ratios)
            and "memory_bandwidth" in warned
            and "peak_bf16" in warned
        )
    else:
        out["ok"] = "cpu_memory_copy" in out["runs"][0]["cli"] and "peak_bf16" not in out["runs"][0]["cli"]
    print(json.dumps(out))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
