"""Node-side halves of the launch gates: port checks, the fabric canary run, incident bundles.

Each runs on the node through the agent (`sparkfleet agent canary|incident`), because what it
reads is the node's own: its sockets, its image, its kernel log, its GPU, its rank logs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from ..base import procs
from ..base.atomic import write_bytes
from ..base.sanitize import Secrets
from ..base.selfexec import script_argv
from ..facts import apikeys
from ..lane.manifest import BindMount
from ..lane.spec import LaunchSpec, redact_env, secret_values
from . import canary_worker, records, watchdog
from .protocol import CanaryRequest, IncidentRequest
from .records import tail_bytes
from .runtimes import container_run_argv, runtime_for

WORKER_MOUNT = "/opt/sparkfleet/canary_worker.py"


def ports_in_use(ports: list[int]) -> list[int]:
    """The ports of `ports` something on this node already listens on (or holds bound)."""
    busy = []
    for port in ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                busy.append(port)
    return busy


def _last_json(text: str) -> dict | None:
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                return json.loads(line)
    return None


def canary_args(spec: LaunchSpec, req: CanaryRequest) -> list[str]:
    """The canary worker's arguments (after `python WORKER`)."""
    c = req.canary
    return ["--rank", str(spec.rank), "--world", str(spec.nnodes), "--master", req.master,
            "--port", str(req.port), "--backend", c.backend, "--bytes", str(c.bytes),
            "--pair-bytes", str(c.pair_bytes), "--iters", str(c.iters),
            "--timeout", str(c.timeout)]  # fmt: skip


def container_canary_argv(
    spec: LaunchSpec, req: CanaryRequest, engine: str, env_file: Path, worker: str
) -> list[str]:
    """`docker|podman run --rm` of the canary in the lane's image: the lane's own flags (network, ipc,
    GPUs, RDMA devices, memlock, env file), the worker bind-mounted read-only, no model binds."""
    cspec = dataclasses.replace(
        spec,
        name=f"{spec.name}-canary",
        binds=(BindMount(Path(worker), WORKER_MOUNT, True, "canary"),),
        argv=(req.canary.python, WORKER_MOUNT, *canary_args(spec, req)),
    )
    argv = container_run_argv(cspec, spec.runtime, env_file)
    if argv[2] != "-d":
        raise AssertionError(f"unexpected container argv {argv[:3]}")
    return [engine, "run", "--rm", *argv[3:]]


def canary(req: CanaryRequest) -> dict:
    """Run this rank's canary in the lane's runtime (its image for docker/podman) and return its JSON."""
    spec = LaunchSpec.from_dict(req.spec)
    timeout = req.canary.timeout + 60
    worker = str(Path(canary_worker.__file__).resolve())
    started = time.monotonic()
    cleanup: list[str] | None = None
    env: dict[str, str] | None = None
    if spec.runtime == "process":
        argv = script_argv(worker, *canary_args(spec, req))  # our interpreter, our search path
        env = {**os.environ, **spec.env}
    else:
        engine = shutil.which(spec.runtime) or spec.runtime
        env_file = records.lane_dir(Path(spec.state_dir), spec.lane) / f"canary{spec.rank}.env"
        env_file.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(env_file, "".join(f"{k}={v}\n" for k, v in spec.env.items()).encode(), mode=0o600)
        argv = container_canary_argv(spec, req, engine, env_file, worker)
        cleanup = [engine, "rm", "-f", f"{spec.name}-canary"]
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env,
                            stdin=subprocess.DEVNULL)  # fmt: skip
        out, err, code = cp.stdout, cp.stderr, cp.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err, code = f"canary did not finish in {timeout:.0f} s", 124
    finally:
        if cleanup:
            subprocess.run(cleanup, capture_output=True, stdin=subprocess.DEVNULL)
    result = _last_json(out) or {
        "ok": False,
        "stage": "start",
        "error": (err.strip().splitlines() or [f"exit {code}, no output"])[-1],
    }
    result["seconds"] = time.monotonic() - started
    if result.get("ok"):
        _record_fabric(Path(spec.state_dir), req.canary.backend, result)
    return {"result": result}


def _record_fabric(state_dir: Path, backend: str | None, result: dict) -> None:
    """What the canary measured, kept for the roofline (roofline/machine.py measurements.json)."""
    from ..roofline.machine import record_measurements

    found = {}
    how = f"fabric canary ({backend})"
    if result.get("busbw_gbps"):
        found["fabric_link"] = (result["busbw_gbps"] * 1e9 / 8, f"{how}: all-reduce bus bandwidth")
    if result.get("small_all_reduce_s"):
        found["fabric_latency"] = (result["small_all_reduce_s"], f"{how}: one 16 KiB all-reduce")
    if found:
        record_measurements(state_dir, found)


# ---- incident bundles ---------------------------------------------------------------------------


def _cmd(argv: list[str], limit: int = 200_000) -> str:
    if shutil.which(argv[0]) is None:
        return f"{argv[0]} not present on this node"
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"{' '.join(argv)} timed out"
    text = cp.stdout if cp.returncode == 0 else f"exit {cp.returncode}: {cp.stderr.strip()}"
    return text[-limit:]


def _rank_env(rec: records.LaunchRecord) -> dict[str, str] | str:
    """The rank's env as it runs, secrets included (the caller redacts): /proc of the serve command,
    else the 0600 env file the rank was given (a container's, or a process rank's that is gone)."""
    if rec.runtime == "process" and rec.pid and records.is_ours(rec):
        kids = [p for p in procs.group_members(rec.pgid or rec.pid) if p != rec.pid] or [rec.pid]
        try:
            raw = Path(f"/proc/{max(kids)}/environ").read_bytes().decode(errors="replace")
            return dict(kv.split("=", 1) for kv in raw.split("\0") if "=" in kv)
        except OSError as exc:
            return f"cannot read: {exc}"
    env_file = Path(rec.log_path).with_suffix(".env")
    try:
        lines = env_file.read_text().splitlines()
        return dict(ln.split("=", 1) for ln in lines if "=" in ln)
    except OSError:
        return f"not available ({rec.runtime} rank {'running' if records.is_ours(rec) else 'gone'})"


def boot_stage(log_text: str, signatures: list[str]) -> str | None:
    """The last boot signature (in recipe order) the log shows: how far the rank got."""
    reached = None
    for sig in signatures:
        if sig in log_text:
            reached = sig
    return reached


def incident(req: IncidentRequest) -> dict:
    """Everything a human needs about this node's ranks of the lane, at the moment of failure."""
    state_dir = Path(req.state_dir)
    lines = req.lines
    ranks: list[dict[str, Any]] = []
    secrets: set[str] = set(req.secrets)  # what the operator knows (the recipe's env)
    key = apikeys.read_key(state_dir, req.lane)
    for rec in records.load_all(state_dir, req.lane):
        runtime = runtime_for(rec.runtime)
        if rec.runtime == "process":
            data = tail_bytes(rec.log_path)
        else:
            data, _ = runtime.read_log(rec, 0, 1 << 30)
        text = apikeys.scrub(data.decode("utf-8", errors="replace"), key)  # engines log their args
        st = runtime.state(rec)
        env = _rank_env(rec)
        if isinstance(env, dict):
            secrets |= secret_values(env)
            env = redact_env(env)
        ranks.append({
            "rank": rec.rank,
            "record": dataclasses.asdict(rec),
            "running": st.running,
            "returncode": st.returncode,
            "log_tail": "\n".join(text.splitlines()[-lines:]),
            "boot_stage": boot_stage(text, req.signatures),
            "env": env,
        })  # fmt: skip
    bundle = {
        "hostname": socket.gethostname(),
        "collected_at": time.time(),
        "ranks": ranks,
        "dmesg": _cmd(["dmesg", "--ctime"])[-100_000:],
        "nvidia_smi_q": _cmd(["nvidia-smi", "-q"]),
        "meminfo": _read(watchdog.meminfo_source()),
        "memstop": watchdog.read_memstop(state_dir, req.lane),
    }
    # Every secret value of every rank's env, whatever its key, cut out of every text before it
    # leaves the node (a server logging its own token, a DSN in a traceback, dmesg, ...).
    return Secrets(tuple(sorted(secrets, key=len, reverse=True))).safe_all(bundle)


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        return f"cannot read {path}: {exc}"
