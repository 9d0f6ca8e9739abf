"""The fabric canary's rank side: runs INSIDE the lane's image, with only the stdlib and torch.

Why: NCCL can pass every static check and still hang in the real serve (eugr/spark-vllm-docker
#252). So before any weights load, every rank runs this in the very image and env the lane will
serve with: rendezvous on the lane's dist-init address and port, a TCP check of every rank pair
(which pair cannot talk, over which interface), then a short all-reduce and all-gather through
torch.distributed (NCCL over RoCE on the fleet, gloo over the namespace network in tests), with
the results checked and the bus bandwidth measured. One JSON line on stdout says what happened.

It imports nothing from sparkfleet (the image does not have it): the node agent bind-mounts this
file read-only and runs `python3 /opt/sparkfleet/canary_worker.py --rank ...`.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import json
import os
import re
import shutil
import socket
import stat
import struct
import sys
import tempfile
import threading
import time

SIOCGIFADDR = 0x8915


def interfaces() -> dict[str, str]:
    """IPv4 address -> interface name, for every interface with an IPv4 address."""
    out = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            out[socket.inet_ntoa(raw[20:24])] = name
    return out


def my_address(master: str) -> tuple[str, str | None]:
    """(IP, interface) this rank talks on: the socket ifname from env, SGLANG_HOST_IP, else the route."""
    by_ip = interfaces()
    by_name = {v: k for k, v in by_ip.items()}
    for key in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        name = os.environ.get(key, "").split(",")[0].lstrip("=^")
        if name in by_name:
            return by_name[name], name
    ip = os.environ.get("SGLANG_HOST_IP")
    if not ip:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((master, 9))
            ip = s.getsockname()[0]
    return ip, by_ip.get(ip)


def ifname_matches(spec: str, names: list[str]) -> list[str]:
    """The interfaces an NCCL/gloo socket-ifname value selects, by NCCL's own rules: a comma list of
    prefixes, `=` for exact names, `^` to exclude (an exclusion list selects whatever it leaves)."""
    spec = spec.strip()
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    exact = spec.startswith("=")
    wanted = [w for w in spec.lstrip("=").split(",") if w]

    def hit(name: str) -> bool:
        return any(name == w if exact else name.startswith(w) for w in wanted)

    return [n for n in names if hit(n) != exclude]


def env_problems(environ: dict[str, str], names: list[str], backend: str, gpus: int | None) -> list[str]:
    """Pure: what in this rank's env cannot work on this host, said before any collective hangs on
    it. `names` are the host's interfaces; `gpus` the CUDA devices torch sees (None: not asked)."""
    problems = []
    keys = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME") if backend == "nccl" else ("GLOO_SOCKET_IFNAME",)
    for key in keys:
        value = environ.get(key)
        if value and not ifname_matches(value, names):
            problems.append(f"{key}={value} selects no interface on this host (it has {', '.join(names)})")
    if backend == "nccl" and gpus is not None:
        local = int(environ.get("LOCAL_RANK", "0") or 0)
        cvd = environ.get("CUDA_VISIBLE_DEVICES")
        shown = f"CUDA_VISIBLE_DEVICES={cvd}" if cvd is not None else "CUDA_VISIBLE_DEVICES unset"
        if gpus == 0:
            problems.append(f"no GPU visible to this rank ({shown})")
        elif local >= gpus:
            problems.append(f"LOCAL_RANK={local} but only {gpus} GPU(s) visible ({shown})")
    return problems


# NCCL's own log (NCCL_DEBUG=INFO into NCCL_DEBUG_FILE): what it decided, read back after the run.
_NET = re.compile(r"Using network (\w+)")
_SET = re.compile(r"(NCCL_[A-Z0-9_]+) set (?:by environment )?to (\S+?)\.?$")
_VIA = re.compile(r"via (P2P|SHM|NET|COLLNET)(?:/(\w+))?")


def summarize_nccl_log(text: str) -> dict:
    """Pure: NCCL's INFO/WARN lines → the network it chose, the settings it saw from the environment,
    the transports its channels use, and its own warnings, kept verbatim (the cause of a failure)."""
    networks, transports, settings, warnings = [], set(), {}, []
    for line in text.splitlines():
        if " NCCL WARN " in line:
            warnings.append(line.split(" NCCL WARN ", 1)[1].strip())
            continue
        if (m := _NET.search(line)) and m.group(1) not in networks:
            networks.append(m.group(1))
        if m := _SET.search(line):
            settings[m.group(1)] = m.group(2)
        if m := _VIA.search(line):
            transports.add("/".join(x for x in m.groups() if x))
        if "NET/IB : No device found" in line:
            settings.setdefault("_ib", "no device found")
    return {
        "network": networks[0] if networks else None,
        "env": settings,
        "transports": sorted(transports),
        "warnings": warnings[:20],
    }


def nccl_fallback(environ: dict[str, str], summary: dict) -> str | None:
    """The lane names an IB/RoCE HCA but NCCL's channels run over sockets: say so (a silent fall to
    TCP is the slow night the canary exists to catch)."""
    hca = environ.get("NCCL_IB_HCA")
    if hca and summary.get("network") == "Socket":
        why = "; NET/IB found no device" if summary["env"].get("_ib") else ""
        return f"NCCL_IB_HCA={hca} but NCCL fell back to sockets (network Socket{why})"
    return None


def _read_nccl_logs(logdir: str | None) -> str:
    if not logdir:
        return ""
    try:
        names = sorted(os.listdir(logdir))
    except OSError:
        return ""
    chunks = []
    for name in names:
        # NCCL writes regular files; anything else there (a FIFO would block open() forever, a
        # directory would raise) is skipped, and one unreadable file does not hide the others
        with contextlib.suppress(OSError):
            fd = os.open(os.path.join(logdir, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with open(fd, errors="replace") as f:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    chunks.append(f.read(1 << 20))
    return "\n".join(chunks)


def emit(result: dict) -> None:
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def pair_phase(store, rank: int, world: int, ip: str, ifname: str | None, pair_bytes: int, timeout: float):
    """Every rank dials every other rank's listener and pushes `pair_bytes`: failures and throughput."""
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((ip, 0))
    lsock.listen(world)
    stop = threading.Event()

    def serve() -> None:
        lsock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = lsock.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                conn.settimeout(timeout)
                with contextlib.suppress(OSError):
                    while conn.recv(1 << 20):
                        pass
                    continue

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    me = {"rank": rank, "ip": ip, "port": lsock.getsockname()[1], "ifname": ifname}
    store.set(f"addr/{rank}", json.dumps(me))
    store.wait([f"addr/{r}" for r in range(world)], datetime.timedelta(seconds=timeout))
    peers = [json.loads(store.get(f"addr/{r}")) for r in range(world)]
    results = []
    payload = b"\0" * min(pair_bytes, 1 << 20)
    for p in peers:
        if p["rank"] == rank:
            continue
        entry = {"src": rank, "dst": p["rank"], "src_ip": ip, "src_ifname": ifname, "dst_ip": p["ip"],
                 "dst_port": p["port"], "dst_ifname": p["ifname"]}  # fmt: skip
        t0 = time.perf_counter()
        try:
            with socket.create_connection((p["ip"], p["port"]), timeout=min(timeout, 10.0)) as c:
                sent = 0
                while sent < pair_bytes:
                    sent += c.send(payload[: pair_bytes - sent])
                c.shutdown(socket.SHUT_WR)
                c.settimeout(timeout)
                c.recv(1)  # the peer closes after draining: the bytes really arrived
            secs = time.perf_counter() - t0
            entry.update(ok=True, gbps=pair_bytes * 8 / secs / 1e9 if secs > 0 else None)
        except OSError as exc:
            entry.update(ok=False, error=f"{type(exc).__name__}: {exc}")
        results.append(entry)
    store.set(f"pairs/{rank}", json.dumps(results))
    store.wait([f"pairs/{r}" for r in range(world)], datetime.timedelta(seconds=timeout + 30))
    every = [e for r in range(world) for e in json.loads(store.get(f"pairs/{r}"))]
    stop.set()
    t.join(2)
    lsock.close()
    return peers, every


def collective_phase(store, rank: int, world: int, backend: str, size: int, iters: int, timeout: float):
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        backend, store=dist.PrefixStore("canary", store), rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=timeout),
    )  # fmt: skip
    try:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if backend == "nccl" else None
        n = max(1, size // 4)
        x = torch.full((n,), float(rank + 1), dtype=torch.float32, device=device)
        dist.all_reduce(x)  # warm-up: connections are set up here
        want = world * (world + 1) / 2
        if float(x[0]) != want or float(x[-1]) != want:
            return {
                "ok": False,
                "stage": "all_reduce",
                "error": f"all-reduce gave {float(x[0])}, expected {want}",
            }
        def timed(t) -> float:
            """Seconds per all-reduce of `t`, averaged over `iters` (device work finished)."""
            if device is not None:
                torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t)
            if device is not None:
                torch.cuda.synchronize()
            return (time.perf_counter() - start) / iters

        secs = timed(x)
        # A decode step's all-reduce is small (one token's activations): its time is latency, the
        # per-collective cost the roofline's fabric term needs.
        small = torch.ones(4096, dtype=torch.float32, device=device)  # 16 KiB
        dist.all_reduce(small)  # warm-up of the small size
        small_secs = timed(small)
        mine = torch.full((1024,), float(rank), dtype=torch.float32, device=device)
        gathered = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(gathered, mine)
        got = [float(g[0]) for g in gathered]
        if got != [float(r) for r in range(world)]:
            return {"ok": False, "stage": "all_gather", "error": f"all-gather gave ranks {got}"}
        algbw = size / secs
        return {
            "ok": True,
            "stage": "done",
            "all_reduce_s": secs,
            "small_all_reduce_s": small_secs,
            "busbw_gbps": algbw * 2 * (world - 1) / world * 8 / 1e9 if world > 1 else None,
            "torch": torch.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if backend == "nccl" else None,
        }
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="sparkfleet-canary")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master", required=True, help="the head's dist-init address")
    p.add_argument("--port", type=int, required=True, help="the lane's dist-init (rendezvous) port")
    p.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    p.add_argument("--bytes", type=int, default=16 << 20)
    p.add_argument("--pair-bytes", type=int, default=4 << 20)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--timeout", type=float, default=60.0)
    a = p.parse_args(argv)
    out: dict = {"rank": a.rank, "world": a.world, "backend": a.backend}
    try:
        ip, ifname = my_address(a.master)
    except OSError as exc:
        emit({**out, "ok": False, "stage": "address", "error": str(exc)})
        return 1
    out.update(ip=ip, ifname=ifname)
    gpus = None
    if a.backend == "nccl":
        try:
            import torch

            gpus = torch.cuda.device_count()
        except ImportError:
            pass  # said at the import stage below
    problems = env_problems(dict(os.environ), sorted(set(interfaces().values())), a.backend, gpus)
    if problems:
        emit({**out, "ok": False, "stage": "env", "error": "; ".join(problems)})
        return 1
    logdir = None
    if a.backend == "nccl":
        # NCCL's own account of the run, whatever the lane's NCCL_DEBUG: kept in the record.
        logdir = tempfile.mkdtemp(prefix="sparkfleet-canary-nccl-")
        out["nccl_debug_lane"] = os.environ.get("NCCL_DEBUG")
        os.environ.update(NCCL_DEBUG="INFO", NCCL_DEBUG_FILE=os.path.join(logdir, "nccl.%h.%p.log"))
        os.environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT,ENV,NET")
    if a.backend == "gloo" and ifname and not os.environ.get("GLOO_SOCKET_IFNAME"):
        os.environ["GLOO_SOCKET_IFNAME"] = ifname  # gloo would otherwise resolve the hostname
    try:
        from torch.distributed import TCPStore
    except ImportError as exc:
        emit({**out, "ok": False, "stage": "import", "error": f"torch.distributed is not importable: {exc}"})
        return 1
    try:
        store = TCPStore(a.master, a.port, a.world, a.rank == 0, datetime.timedelta(seconds=a.timeout),
                         wait_for_workers=True)  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError/DistStoreError/OSError
        emit({**out, "ok": False, "stage": "rendezvous", "error": f"{a.master}:{a.port}: {exc}"})
        return 1
    try:
        peers, pairs = pair_phase(store, a.rank, a.world, ip, ifname, a.pair_bytes, a.timeout)
    except Exception as exc:  # noqa: BLE001
        emit({**out, "ok": False, "stage": "pairs", "error": str(exc)})
        return 1
    out.update(peers=peers, pairs=pairs)
    if any(not e["ok"] for e in pairs):
        emit({**out, "ok": False, "stage": "pairs", "error": "rank pairs cannot connect"})
        return 1
    try:
        res = collective_phase(store, a.rank, a.world, a.backend, a.bytes, a.iters, a.timeout)
    except Exception as exc:  # noqa: BLE001
        res = {"ok": False, "stage": "collective", "error": f"{type(exc).__name__}: {exc}"}
    if logdir:
        summary = summarize_nccl_log(_read_nccl_logs(logdir))
        shutil.rmtree(logdir, ignore_errors=True)
        res["nccl_log"] = summary
        if not res.get("ok") and summary["warnings"]:
            res["error"] = f"{res.get('error')}; NCCL: {summary['warnings'][0]}"
        fallback = nccl_fallback(dict(os.environ), summary)
        if fallback and res.get("ok"):
            res.update(ok=False, stage="transport", error=fallback)
    emit({**out, **res})
    return 0 if res.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
