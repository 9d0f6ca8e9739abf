#!/usr/bin/env python3
"""NAS bytes and wall time, independent vs fan-out staging, on links shaped like the fleet's.

Real topology, as in the tests: a NAS network namespace serving its hub over sshd, host
namespaces with their own sshd, NVMe dir and sshfs mount of the NAS. Bytes leaving the NAS are
its interface's TX counter. Links are shaped like the fleet's with tc: the NAS's eth0 (one shared
~10 GbE port on the fleet) with a token bucket at --nas-mbit, each host's eth0 at --fabric-ratio
times that (200 GbE RoCE : 10 GbE = 20). On this 2-core machine the host links are CPU-bound far
below 20x (ssh/rsync/hash share the two cores); the record says how far (peer_MBps vs host_MBps).

One run, side by side, one JSON line:
  - one host alone from the NAS ("one wave": the time the NAS link needs for one copy);
  - --hosts hosts independent (each reads everything from the NAS);
  - the same hosts with fan-out, once per peer transport (ssh, ssh-fast, rsyncd);
  - --scale (e.g. 8,16): fan-out with that many hosts, default transport; waves = wall / one wave.
Needs root (namespaces, FUSE, tc).

Usage: python benchmarks/fanout_bench.py [--hosts 4] [--scale 8,16] [--shard-mib 64] [--nas-mbit 100]
       python benchmarks/fanout_bench.py --smoke   # seconds: 2 hosts (+3 scaled), 1 MiB shards
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
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
from sparkfleet.stage.transport import DEFAULT_TRANSPORT, TRANSPORTS, resolve_transport  # noqa: E402

DEFAULT = resolve_transport(DEFAULT_TRANSPORT, fabric_declared=True)  # every bench host has a fabric_ip
from support.fleetnet import (  # noqa: E402
    FleetNet,
    fuse_skip_reason,
    netns_skip_reason,
    sshfs_mount,
    tc_skip_reason,
    write_ssh_config,
)
from support.stagefleet import nas_tx_bytes, shape_fleet, write_lane_fleet  # noqa: E402


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


def transport_mbps(hosts: dict, root: Path, ssh_config: Path, rounds: int = 3) -> dict[str, float]:
    """Peer-pull throughput of each transport alone: dgx1 pulls dgx2's largest blob, rounds
    alternating the transports, median MB/s (the rsync client runs in dgx1's namespace)."""
    from sparkfleet.fleet.inventory import load
    from sparkfleet.stage import remote
    from sparkfleet.stage.transport import SECRET_ENV, PeerSource

    src, dst = hosts["dgx1"], hosts["dgx2"]
    hub = dst.nvme / "hub"
    blob = max(
        (p for p in hub.rglob("*") if p.is_file() and not p.is_symlink()), key=lambda p: p.stat().st_size
    )
    rel, size = str(blob.relative_to(hub)), blob.stat().st_size
    secret = os.urandom(24).hex()
    options = remote.StageOptions(peer_transport="rsyncd", ssh_config=ssh_config)
    times: dict[str, list[float]] = {t: [] for t in TRANSPORTS}
    inv = load(root)  # namespaces share this filesystem: every host reads the same fleet root
    served = remote.serving(inv, ["dgx1", "dgx2"], options, secret, lambda h, e: None, lambda h: inv.root)
    with served as ports:
        peers = {
            t: PeerSource("dgx2", hub, ("ssh", "-F", str(ssh_config)), "dgx2", t)
            for t in TRANSPORTS
            if t != "rsyncd"
        }
        peers["rsyncd"] = PeerSource("dgx2", hub, (), dst.addr, "rsyncd", ports[1], secret)
        for r in range(rounds):
            for t in TRANSPORTS[r % len(TRANSPORTS) :] + TRANSPORTS[: r % len(TRANSPORTS)]:
                tmp = src.nvme / f"transport-probe-{t}"
                tmp.unlink(missing_ok=True)
                start = time.perf_counter()
                subprocess.run(
                    src.exec_argv(*peers[t].rsync_argv(rel, tmp)),
                    check=True,
                    capture_output=True,
                    env={**os.environ, SECRET_ENV: secret},
                )
                times[t].append(time.perf_counter() - start)
                tmp.unlink()
    return {t: round(size / 1e6 / sorted(v)[len(v) // 2], 1) for t, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--scale", default="", help="comma-separated host counts for the scaling runs, e.g. 8,16")
    ap.add_argument("--shard-mib", type=int, default=64)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--verify", choices=["sample", "full"], default="sample")
    ap.add_argument("--nas-mbit", type=float, default=100.0, help="NAS link rate (tbf); 0 = unshaped")
    ap.add_argument("--fabric-ratio", type=float, default=20.0, help="host links vs NAS link; 0 = unshaped")
    ap.add_argument("--transports", default=",".join(TRANSPORTS))
    ap.add_argument("--smoke", action="store_true", help="tiny: 2 hosts, 3 scaled, 1 MiB shards")
    args = ap.parse_args()
    if args.smoke:  # every code path and every key of the full run, on tiny data
        args.hosts, args.scale, args.shard_mib, args.shards = 2, "3", 1, 2
        args.transports = resolve_transport(DEFAULT_TRANSPORT, fabric_declared=True)
    cannot = netns_skip_reason() or fuse_skip_reason() or (tc_skip_reason() if args.nas_mbit > 0 else None)
    if cannot:  # one JSON line that says why, and exit 2 (as measure_gpu.py does without CUDA)
        print(json.dumps({"bench": "fanout", "error": f"cannot run here: {cannot}"}))
        raise SystemExit(2)
    scale = [int(n) for n in args.scale.split(",") if n]
    transports = [t for t in args.transports.split(",") if t]
    names = [f"dgx{i + 1}" for i in range(max([args.hosts, *scale]))]
    work = Path(tempfile.mkdtemp(prefix="fanout-bench-"))
    try:
        with FleetNet() as net, contextlib.ExitStack() as mounts:
            nas = mounts.enter_context(net.host("nas"))
            share = nas.root / "share"
            build_nas_hub(
                share / "hub",
                shard_bytes=args.shard_mib * 1024 * 1024,
                shards=args.shards,
                absolute_links=False,
            )
            points = {
                h: mounts.enter_context(
                    sshfs_mount(nas, share, work / f"nas-{h}", extra_opts=("no_contain_symlinks",))
                )
                for h in names
            }
            hosts = {h: net.add_host(h) for h in names}  # after the mounts: each sshd copies the mount table
            shaping = (
                shape_fleet(nas, hosts.values(), int(args.nas_mbit * 1e6), args.fabric_ratio)
                if args.nas_mbit > 0
                else {"nas_bit": None}
            )

            def lane_root(n: int) -> Path:
                lane = names[:n]
                return write_lane_fleet(
                    work / f"fleet{n}",
                    {h: hosts[h].nvme / "hub" for h in lane},
                    {h: points[h] / "hub" for h in lane},
                    f"lane{n}",
                    {h: hosts[h].addr for h in lane},
                )

            roots = {n: lane_root(n) for n in sorted({1, args.hosts, *scale})}
            env = {
                **os.environ,
                "SPARKFLEET_SSH_CONFIG": str(write_ssh_config(hosts, work / "ssh_config")),
                "SPARKFLEET_REMOTE": f"{sys.executable} -m sparkfleet",
            }

            def run(n: int, transport: str | None) -> dict:
                """Stage the n-host lane from empty hubs; transport None = independent."""
                for h in names:
                    shutil.rmtree(hosts[h].nvme / "hub", ignore_errors=True)
                drop_caches()
                before = nas_tx_bytes(nas.netns)
                start = time.perf_counter()
                argv = [sys.executable, "-m", "sparkfleet", "--root", str(roots[n]), "stage", "--lane"]
                argv += [f"lane{n}", *(["--full"] if args.verify == "full" else []), "--json"]
                if transport and n > 1:
                    argv += ["--fanout", "--peer-transport", transport]
                proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=3600)
                seconds = time.perf_counter() - start
                if proc.returncode != 0:
                    raise SystemExit(
                        f"{n} hosts, {transport or 'independent'} failed:\n{proc.stdout}\n{proc.stderr}"
                    )
                report = json.loads(proc.stdout)["hosts"]
                repos = [r for o in report for r in o["run"]["repos"]]
                served: dict[str, int] = {}
                for r in repos:
                    for peer, nbytes in r.get("peer_bytes_from", {}).items():
                        served[peer] = served.get(peer, 0) + nbytes
                peer_bytes = sum(o["run"]["peer_bytes"] for o in report)
                return {
                    "nas_bytes": nas_tx_bytes(nas.netns) - before,
                    "seconds": seconds,
                    "peer_bytes": peer_bytes,
                    "peer_failures": sum(len(r["peer_failures"]) for r in repos),
                    "peer_misses": sum(r.get("peer_misses", 0) for r in repos),
                    "serving_hosts": sum(1 for v in served.values() if v),
                }

            one = run(1, None)
            one_copy = unique_bytes(hosts[names[0]].nvme / "hub")
            wave = one["seconds"]
            independent = run(args.hosts, None)
            fanout = {t: run(args.hosts, t) for t in transports}
            os.environ["SPARKFLEET_REMOTE"] = env["SPARKFLEET_REMOTE"]
            pull_mbps = transport_mbps(
                hosts, roots[args.hosts], Path(env["SPARKFLEET_SSH_CONFIG"]), rounds=1 if args.smoke else 3
            )

            def summary(r: dict, n: int) -> dict:
                out = {
                    "nas_x": round(r["nas_bytes"] / one_copy, 3),
                    "seconds": round(r["seconds"], 2),
                    "waves": round(r["seconds"] / wave, 2),
                }
                if r["peer_bytes"]:
                    out["peer_failures"] = r["peer_failures"]
                    out["peer_misses"] = r["peer_misses"]
                    out["serving_hosts"] = r["serving_hosts"]
                    # all hosts' peer bytes over the time after one wave: flat in n = CPU-bound here
                    out["peer_MBps"] = round(r["peer_bytes"] / 1e6 / max(r["seconds"] - wave, 1e-3), 1)
                    if n == args.hosts:
                        out["wall_vs_independent"] = round(r["seconds"] / independent["seconds"], 3)
                return out

            scaling = []
            for n in scale:
                r = run(n, DEFAULT)
                scaling.append({"hosts": n, **summary(r, n), "log2_hosts": round(math.log2(n), 2)})
            default = fanout.get(DEFAULT) or next(iter(fanout.values()))
            print(
                json.dumps(
                    {
                        "bench": "fanout",
                        "hosts": args.hosts,
                        "verify": args.verify,
                        "shard_mib": args.shard_mib,
                        "shaping": shaping,
                        "one_copy_bytes": one_copy,
                        "one_wave_seconds": round(wave, 2),
                        "one_host": summary(one, 1),
                        "independent": summary(independent, args.hosts),
                        "fanout": {t: summary(r, args.hosts) for t, r in fanout.items()},
                        "default_transport": f"{DEFAULT_TRANSPORT} = {DEFAULT}",
                        "peer_pull_MBps": pull_mbps,
                        "nas_bytes_fanout_vs_one_copy": round(default["nas_bytes"] / one_copy, 3),
                        "wall_fanout_vs_independent": round(default["seconds"] / independent["seconds"], 3),
                        "goals": "fanout NAS bytes <= 1.05x one copy; wall <= 0.5x independent; "
                        "scaling: waves <= log2(hosts)",
                        "scaling": scaling,
                        "smoke": args.smoke,
                    }
                )
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
