#!/usr/bin/env python3
"""Bytes and wall time to bring one image to N hosts: registry pull by digest vs today's ssh stream.

Real topology, as in the tests: a head namespace ("head") runs Debian's docker-registry (TLS from a
fleet CA, `sparkfleet registry init`). It is also where the ssh stream starts, so both ways leave
through the same link. N host namespaces each run sshd and their own podman store. Links are shaped
as in the fan-out benchmark: the head's eth0 at --head-mbit (one shared port), each host's at
--fabric-ratio times that. Bytes are the head namespace's TX counter.

One run, side by side, one JSON line:
  - ssh stream: the built docker-archive, `cat | ssh host podman load`, to every host at once
    (what `sparkfleet image load` does without a registry);
  - registry pull: `skopeo` pushed the same archive once (by digest); every host runs
    `podman pull <registry>/repo@sha256:...` at once;
  - a second pull of the same digest on every host (the RepoDigest is held: ~0 bytes).
Needs root (namespaces, tc), docker-registry, skopeo and podman.

Usage: python benchmarks/image_bench.py [--hosts 4] [--head-mbit 200] [--fabric-ratio 20]
       python benchmarks/image_bench.py --smoke   # 2 hosts, links unshaped: the script cannot rot
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "python"), str(REPO / "tests")]

from sparkfleet.images import registry as reg_mod  # noqa: E402
from support.engines import (  # noqa: E402
    docker_archive,
    engines_skip_reason,
    layer_tar,
    make_rootfs,
    podman_cleanup,
    podman_env,
)
from support.fleetnet import FleetNet, netns_skip_reason, tc_skip_reason  # noqa: E402
from support.registryfleet import served_registry  # noqa: E402
from support.stagefleet import nas_tx_bytes, shape_fleet  # noqa: E402

PORT = 5000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--head-mbit", type=float, default=200.0, help="head link rate (tbf); 0 = unshaped")
    ap.add_argument("--fabric-ratio", type=float, default=20.0, help="host links vs head link")
    ap.add_argument("--smoke", action="store_true", help="2 hosts, head link unshaped (the same image)")
    args = ap.parse_args()
    if args.smoke:
        args.hosts, args.head_mbit = 2, 0.0
    cannot = netns_skip_reason() or engines_skip_reason("podman")
    cannot = cannot or (tc_skip_reason() if args.head_mbit > 0 else None)
    missing = [t for t in ("docker-registry", "skopeo") if not shutil.which(t)]
    cannot = cannot or (f"`{missing[0]}` not found (Debian package {missing[0]})" if missing else None)
    if cannot:  # one JSON line that says why, and exit 2 (as measure_gpu.py does without CUDA)
        print(json.dumps({"error": f"cannot run here: {cannot}"}))
        raise SystemExit(2)
    work = Path(tempfile.mkdtemp(prefix="image-bench-"))
    stores: list[tuple[dict, Path]] = []
    certs_d: list[Path] = []
    try:
        with FleetNet() as net, contextlib.ExitStack() as stack:
            # `registry init` + `registry serve` in the head namespace: pulls at PORT, pushes at PORT+1
            served = stack.enter_context(served_registry(net, work, "head", PORT))
            head, reg = served.host, served.reg
            layer = layer_tar(make_rootfs(work / "rootfs"))
            archive = work / "image.tar"
            image_id = docker_archive(layer, archive, "sparkfleet/bench:build", "bench")
            address = reg.address
            trust = Path("/etc/containers/certs.d") / address
            trust.mkdir(parents=True, exist_ok=True)
            shutil.copy(reg.cert_dir / "ca.crt", trust / "ca.crt")
            certs_d.append(trust)
            digest = reg_mod.push(reg, archive, "sparkfleet/bench", "build")  # once, from this machine
            hosts = {}
            for i in range(args.hosts):
                env = podman_env(work / f"podman{i}")
                stores.append((env, work / f"podman{i}"))
                hosts[f"dgx{i + 1}"] = net.add_host(f"dgx{i + 1}", env=env, share_mounts=True)
            shaping = (
                shape_fleet(head, hosts.values(), int(args.head_mbit * 1e6), args.fabric_ratio)
                if args.head_mbit > 0
                else {"nas_bit": None}
            )
            key = head.root / "id"
            shutil.copy(next(iter(hosts.values())).key, key)  # the fleet's client key, usable from head
            key.chmod(0o600)

            def from_head(h, remote: str, stdin_file: Path | None = None) -> None:
                ssh = ["ssh", "-i", str(key), "-o", "StrictHostKeyChecking=no",
                       "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                       "-p", str(h.port), f"root@{h.addr}", remote]  # fmt: skip
                cmd = (
                    shlex.join(ssh)
                    if stdin_file is None
                    else f"cat {shlex.quote(str(stdin_file))} | {shlex.join(ssh)}"
                )
                cp = subprocess.run(
                    head.exec_argv("sh", "-c", cmd), capture_output=True, text=True, timeout=3600
                )
                if cp.returncode != 0:
                    raise SystemExit(f"{h.name}: {remote} failed: {cp.stderr[-500:]}")

            def every_host(fn) -> tuple[int, float]:
                before, start = nas_tx_bytes(head.netns), time.perf_counter()
                with ThreadPoolExecutor(len(hosts)) as pool:
                    list(pool.map(fn, hosts.values()))
                return nas_tx_bytes(head.netns) - before, time.perf_counter() - start

            ref = reg.ref("sparkfleet/bench", digest=digest)
            ssh_bytes, ssh_s = every_host(lambda h: from_head(h, "podman load -q", archive))
            for h in hosts.values():  # empty stores again: the pull starts from nothing, like the stream
                from_head(h, f"podman rmi -f {image_id}")
            pull_bytes, pull_s = every_host(lambda h: from_head(h, f"podman pull -q {shlex.quote(ref)}"))
            again_bytes, again_s = every_host(
                lambda h: from_head(
                    h, f"podman image exists {shlex.quote(ref)} || podman pull -q {shlex.quote(ref)}"
                )
            )
            print(json.dumps({
                "hosts": args.hosts,
                "image_archive_bytes": archive.stat().st_size,
                "ssh_stream": {"bytes": ssh_bytes, "seconds": round(ssh_s, 2)},
                "registry_pull": {"bytes": pull_bytes, "seconds": round(pull_s, 2)},
                "second_pull": {"bytes": again_bytes, "seconds": round(again_s, 2)},
                "pull_vs_stream_bytes": round(pull_bytes / ssh_bytes, 3) if ssh_bytes else None,
                "pull_vs_stream_seconds": round(pull_s / ssh_s, 3) if ssh_s else None,
                "shaping": shaping,
                "digest": digest,
                "smoke": args.smoke,
            }))  # fmt: skip
    finally:
        for env, base in stores:
            podman_cleanup(env, base)
        for d in certs_d:
            shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
