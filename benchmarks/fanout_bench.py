#!/usr/bin/env python3
"""NAS bytes and wall time for staging 4 hosts: fan-out vs independent; prints one JSON line.

Real topology, as in the tests: a NAS network namespace serving its hub over sshd, four host
namespaces with their own sshd, NVMe dir and sshfs mount of the NAS. Bytes leaving the NAS are
its interface's TX counter. Needs root (namespaces, FUSE). Goal: fan-out <= 1.1x one copy from
the NAS (vs ~4x independent).

Usage: python benchmarks/fanout_bench.py [--shard-mib 64] [--verify sample|full]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "python"), str(REPO / "tests")]

from sparkfleet.demo.hubfixture import build_nas_hub  # noqa: E402
from support.fleetnet import FleetNet, sshfs_mount, write_ssh_config  # noqa: E402
from support.stagefleet import nas_tx_bytes, write_lane_fleet  # noqa: E402

HOSTS = ["dgx1", "dgx2", "dgx3", "dgx4"]


def unique_bytes(hub: Path) -> int:
    inodes = {}
    for p in hub.rglob("*"):
        if p.is_file() and not p.is_symlink() and ".locks" not in p.parts:
            st = p.stat()
            inodes[st.st_ino] = st.st_size
    return sum(inodes.values())


def drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    with contextlib.suppress(OSError):
        Path("/proc/sys/vm/drop_caches").write_text("3\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shard-mib", type=int, default=64)
    ap.add_argument("--verify", choices=["sample", "full"], default="sample")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fanout-bench-"))
    try:
        with FleetNet() as net, contextlib.ExitStack() as mounts:
            nas = mounts.enter_context(net.host("nas"))
            share = nas.root / "share"
            build_nas_hub(share / "hub", shard_bytes=args.shard_mib * 1024 * 1024, absolute_links=False)
            points = {
                h: mounts.enter_context(
                    sshfs_mount(nas, share, work / f"nas-{h}", extra_opts=("no_contain_symlinks",))
                )
                for h in HOSTS
            }
            hosts = {h: net.add_host(h) for h in HOSTS}  # after the mounts: each sshd copies the mount table
            root = write_lane_fleet(
                work / "fleet",
                {h: hosts[h].nvme / "hub" for h in HOSTS},
                {h: points[h] / "hub" for h in HOSTS},
                "lane4",
            )
            env = {
                **os.environ,
                "SPARKFLEET_SSH_CONFIG": str(write_ssh_config(hosts, work / "ssh_config")),
                "SPARKFLEET_REMOTE": f"{sys.executable} -m sparkfleet",
            }
            results = {}
            for mode in ("independent", "fanout"):
                for h in hosts.values():
                    shutil.rmtree(h.nvme / "hub", ignore_errors=True)
                drop_caches()
                before = nas_tx_bytes(nas.netns)
                start = time.perf_counter()
                argv = [sys.executable, "-m", "sparkfleet", "--root", str(root), "stage", "--lane", "lane4"]
                argv += ["--verify", args.verify, "--json"] + (["--fanout"] if mode == "fanout" else [])
                proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
                seconds = time.perf_counter() - start
                if proc.returncode != 0:
                    raise SystemExit(f"{mode} failed:\n{proc.stdout}\n{proc.stderr}")
                hosts_report = json.loads(proc.stdout)["hosts"]
                results[mode] = {
                    "nas_bytes": nas_tx_bytes(nas.netns) - before,
                    "seconds": seconds,
                    "peer_failures": sum(
                        len(r["peer_failures"]) for o in hosts_report for r in o["run"]["repos"]
                    ),
                }
            one_copy = unique_bytes(hosts["dgx1"].nvme / "hub")
            print(
                json.dumps(
                    {
                        "bench": "fanout",
                        "hosts": len(HOSTS),
                        "verify": args.verify,
                        "one_copy_bytes": one_copy,
                        "nas_bytes_vs_one_copy_independent": round(
                            results["independent"]["nas_bytes"] / one_copy, 3
                        ),
                        "nas_bytes_vs_one_copy_fanout": round(results["fanout"]["nas_bytes"] / one_copy, 3),
                        "goal": "fanout <= 1.1x one copy (vs 4x)",
                        "wall_time_fanout_vs_independent": round(
                            results["fanout"]["seconds"] / results["independent"]["seconds"], 3
                        ),
                        "seconds": {k: round(v["seconds"], 2) for k, v in results.items()},
                        "peer_failures": results["fanout"]["peer_failures"],
                    }
                )
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
