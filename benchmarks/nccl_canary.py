"""The fabric canary on real GPUs with NCCL, beside a reference, and its failure paths.

Why: the canary gates every launch, but on the fleet it runs NCCL, which the namespace tests (gloo on
CPU) never touch. This script runs the canary's own worker, one process per GPU, with the argv the
node agent gives a rank and the TP4 recipe's NCCL settings, then:
- times torch's own all_reduce with CUDA events, nccl-tests style (bus bandwidth = algbw·2(n−1)/n),
  and prints the canary's figures beside it as ratios;
- shows what NCCL itself says of the recipe's settings (NCCL_DEBUG=INFO: P2P, SHM, cuMem);
- runs the failure paths: a wrong NCCL_SOCKET_IFNAME, a wrong CUDA_VISIBLE_DEVICES, an NCCL_IB_HCA
  naming no device — each must end inside its timeout and name the rank and the cause.
NVLink multicast stays off in every process (NCCL_NVLS_ENABLE=0 and its kin).

Prints one JSON line. With no CUDA device it says so and exits 2; `--smoke` runs the gloo path on
the CPU with two ranks (seconds), so the script itself cannot rot.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "python" / "sparkfleet" / "node" / "canary_worker.py"
RECIPE = ROOT / "recipes" / "dsv41-flash-4x-mia" / "recipe.toml"
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def recipe_nccl_env() -> dict[str, str]:
    """The TP4 recipe's own [launch.env] NCCL settings (read, not restated)."""
    env = tomllib.loads(RECIPE.read_text())["launch"]["env"]
    return {k: str(v) for k, v in env.items() if k.startswith("NCCL_")}


def run_canary(world: int, backend: str, extra: dict[int, dict[str, str]], timeout: float, nbytes: int,
               iters: int) -> tuple[list[dict], float]:
    """All ranks of the canary worker at once, as the agent starts them; their JSON answers."""
    port = free_port()
    procs = []
    t0 = time.monotonic()
    for rank in range(world):
        env = {**os.environ, **NO_MULTICAST, "LOCAL_RANK": str(rank), **extra.get(rank, {})}
        argv = [sys.executable, str(WORKER), "--rank", str(rank), "--world", str(world), "--master",
                "127.0.0.1", "--port", str(port), "--backend", backend, "--bytes", str(nbytes),
                "--pair-bytes", str(1 << 20), "--iters", str(iters), "--timeout", str(timeout)]  # fmt: skip
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    answers = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout + 60)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        line = next((x for x in reversed(out.splitlines()) if x.startswith("{")), None)
        answers.append(json.loads(line) if line else {"ok": False, "stage": "no answer", "error": err[-400:]})
    return answers, time.monotonic() - t0


REFERENCE = r"""
import json, os, sys, datetime, torch, torch.distributed as dist
rank, world, port, nbytes, iters = map(int, sys.argv[1:6])
torch.cuda.set_device(rank)
dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=120))
def timed(n):
    x = torch.ones(n, dtype=torch.float32, device="cuda")
    for _ in range(3):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        dist.all_reduce(x)
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / 1e3 / iters
big, small = timed(nbytes // 4), timed(4096)
algbw = nbytes / big
busbw = algbw * 2 * (world - 1) / world * 8 / 1e9 if world > 1 else None
if rank == 0:
    print(json.dumps({"all_reduce_s": big, "small_all_reduce_s": small, "busbw_gbps": busbw}))
dist.destroy_process_group()
"""


def run_reference(world: int, nbytes: int, iters: int) -> dict:
    port = free_port()
    env = {**os.environ, **NO_MULTICAST}
    argv = [sys.executable, "-c", REFERENCE]
    procs = [subprocess.Popen([*argv, str(r), str(world), str(port), str(nbytes), str(iters)], env=env,
                              stdout=subprocess.PIPE, text=True) for r in range(world)]  # fmt: skip
    outs = [p.communicate(timeout=300)[0] for p in procs]
    return json.loads(outs[0].strip().splitlines()[-1])


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def failure(name: str, answers: list[dict], secs: float, timeout: float) -> dict:
    bad = [a for a in answers if not a.get("ok")]
    return {
        "case": name,
        "failed": bool(bad),
        "within_timeout": secs <= timeout + 60,
        "seconds": round(secs, 1),
        "causes": [f"rank {a.get('rank')}: {a.get('stage')}: {a.get('error')}" for a in bad][:4],
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true", help="gloo on the CPU, two ranks, tiny sizes")
    ap.add_argument("--bytes", type=int, default=256 << 20)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=30.0)
    a = ap.parse_args()
    if importlib.util.find_spec("torch") is None:  # the canary worker is torch.distributed, gloo included
        print(json.dumps({"error": "cannot run here: torch is not installed"}))
        return 2
    if a.smoke:
        answers, secs = run_canary(2, "gloo", {}, 20.0, 1 << 16, 2)
        bad, bsecs = run_canary(2, "gloo", {1: {"GLOO_SOCKET_IFNAME": "nosuch0"}}, 5.0, 1 << 16, 2)
        ok, fails = all(x.get("ok") for x in answers), [failure("wrong GLOO_SOCKET_IFNAME", bad, bsecs, 5.0)]
        print(json.dumps({"smoke": True, "ok": ok, "canary_ok": ok, "seconds": round(secs, 1),
                          "failure": fails[0], "failures": fails}))  # fmt: skip
        return 0
    import torch

    world = torch.cuda.device_count()
    if world == 0:
        print(json.dumps({"error": "no CUDA device: run this where GPUs are (or --smoke)"}))
        return 2
    lane = recipe_nccl_env()
    ok, secs = run_canary(world, "nccl", dict.fromkeys(range(world), lane), a.timeout, a.bytes, a.iters)
    ref = run_reference(world, a.bytes, a.iters)
    head = ok[0]
    log = head.get("nccl_log") or {}
    fails = []
    last = world - 1
    for case, wrong in (("wrong NCCL_SOCKET_IFNAME", {"NCCL_SOCKET_IFNAME": "nosuch0"}),
                        ("wrong CUDA_VISIBLE_DEVICES", {"CUDA_VISIBLE_DEVICES": str(world + 7)})):
        extra = {r: {**lane, **(wrong if r == last else {})} for r in range(world)}
        fails.append(failure(case, *run_canary(world, "nccl", extra, a.timeout, 1 << 20, 2), a.timeout))
    no_hca = dict.fromkeys(range(world), {**lane, "NCCL_IB_HCA": "=mlx5_nosuch"})
    hca_answers, hca_secs = run_canary(world, "nccl", no_hca, a.timeout, 1 << 20, 2)
    fails.append(failure("NCCL_IB_HCA names no device", hca_answers, hca_secs, a.timeout))
    print(json.dumps({
        "world": world,
        "gpu": torch.cuda.get_device_name(0),
        "nccl": head.get("nccl"),
        "canary_ok": all(x.get("ok") for x in ok),
        "canary": {k: head.get(k) for k in ("all_reduce_s", "small_all_reduce_s", "busbw_gbps")},
        "reference": ref,
        "ratio_busbw": ratio(head.get("busbw_gbps"), ref.get("busbw_gbps")),
        "ratio_small_latency": ratio(head.get("small_all_reduce_s"), ref.get("small_all_reduce_s")),
        "nccl_env_seen": log.get("env"),
        "nccl_network": log.get("network"),
        "nccl_transports": log.get("transports"),
        "failures": fails,
        "ib_hca_fallback_log": (hca_answers[0].get("nccl_log") or {}).get("network"),
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
