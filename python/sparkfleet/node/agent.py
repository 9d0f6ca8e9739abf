"""The node side of launch: one JSON request on stdin, one JSON answer on stdout.

The controller runs this on each node through `SshHost` (or `LocalHost`) instead of shipping
shell strings: `sparkfleet agent ACTION` (or `python -m sparkfleet.node.agent ACTION`).
Everything that must read the node itself happens here: its sysfs (fabric), its hubs (staged
and verified state), its receipt roots, its processes and containers, its logs and its ports.

Actions: probe, start, stop, status, watch, logs, doctor, fingerprint, canary, incident, host-facts
(the fleet view's read), and the key and image actions; each reads its request as the record
`protocol` defines for it, the same record the controller encoded, so no key is spelled here. A user
error is answered as {"ok": false, "error": ..., "hint": ...} with exit code 0, so ssh's own 255
stays meaningful; so is any other exception one action raises (exit_code 70, its traceback on
stderr): the controller gets an answer it can report, never a dead agent's silence.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..base.atomic import write_bytes
from ..base.errors import ExitCode, SparkfleetError
from ..base.http import get_json
from ..base.jsonable import to_jsonable
from ..facts import apikeys
from ..facts.display import NVIDIA_DRM_PARAMETERS, DisplayDevice, display_problems, read_display
from ..facts.fabric import detect, scan_ports
from ..lane.bootcache import cache_state
from ..lane.manifest import ModelState, SnapshotFile, snapshot_rel
from ..lane.spec import LaunchSpec
from ..remote.wire import VERSION_HINT, error_answer
from . import records, watchdog
from .node_checks import canary, incident, ports_in_use
from .protocol import (
    ApiKeyRequest,
    ApiKeyWriteRequest,
    CanaryRequest,
    DoctorRequest,
    FingerprintRequest,
    HostFactsRequest,
    ImageCommitRequest,
    ImagePullRequest,
    ImageStateRequest,
    IncidentRequest,
    KitsRequest,
    LogsRequest,
    OccupancyRequest,
    ProbeRequest,
    StartRequest,
    StatusRequest,
    StopRequest,
    WatchRequest,
    read_request,
)
from .receipts import clear_receipts
from .records import tail_bytes
from .runtimes import runtime_for


def _bad_paths(snapshot: str, entries, problems: list[str]) -> set[str]:
    """Entry paths a verify report names, by the entry's own path or the file it resolves to."""
    named = set()
    for p in problems:
        parts = p.split(": ", 2)
        if len(parts) >= 2:
            named.add(parts[1].split(" ", 1)[0])
    return {e.path for e in entries if f"{snapshot}/{e.path}" in named or e.final in named}


def model_state(
    repo: str,
    revision: str,
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    local_hub: Path,
    nas_hub: Path,
    verify_mode: str = "sample",
) -> ModelState:
    """Read the NAS snapshot and verify the local tree on this node (reads only)."""
    from ..stage.plan import StageRequest, plan_stage, scan_source  # lazy: only `probe` reads a hub
    from ..stage.verify import verify_plan

    request = StageRequest(
        source_hub=nas_hub, dest_hub=local_hub, repo=repo, revision=revision, include=include, exclude=exclude
    )
    scan = scan_source(request)
    plan = plan_stage(scan, {})
    report = verify_plan(scan, plan, verify_mode)
    snapshot = snapshot_rel(repo, plan.commit)
    bad = _bad_paths(snapshot, plan.included, report.problems)
    return ModelState(
        repo=repo,
        commit=plan.commit,
        files=tuple(SnapshotFile(e.path, e.excluded) for e in plan.entries),
        local_verified=report.ok,
        bad_paths=tuple(sorted(bad)),
        problems=tuple(report.problems[:20]),
    )


def _lane_key(state_dir: str | None, lane: str | None) -> str | None:
    """The lane's API key on this node (None without one, or without lane/state_dir in the request)."""
    if not (state_dir and lane):
        return None
    return apikeys.read_key(Path(state_dir), lane)


def _http_status(
    port: int, path: str, key: str | None = None, data: bytes | None = None
) -> tuple[int | None, Any]:
    """GET `path` (POST `data` as JSON when given) on the lane's loopback port: the status and a JSON body."""
    return get_json(f"http://127.0.0.1:{port}{path}", key=key, data=data, timeout=2.0)


# ---- actions ----------------------------------------------------------------------------------


def probe(req: ProbeRequest) -> dict:
    """Fabric facts and the staged/verified state of every model the lane needs."""
    out: dict[str, Any] = {"hostname": socket.gethostname()}
    fab = req.fabric
    if fab is not None and fab.needed:
        try:
            out["fabric"] = to_jsonable(detect(scan_ports(Path(fab.sysfs or "/sys")), fab.fabric_ip))
            out["fabric"].pop("ports", None)
        except SparkfleetError as exc:
            out["fabric_error"] = {"error": exc.message, "hint": exc.hint}
    states = []
    if req.models:  # a probe of models without its hubs is a bad request, refused as a whole
        hubs = (req.local_hub_path(), req.nas_hub_path())
    for m in req.models:
        try:
            st = model_state(m.repo, m.revision, tuple(m.include), tuple(m.exclude), *hubs, req.verify_mode)
            states.append(to_jsonable(st))
        except SparkfleetError as exc:
            states.append({"repo": m.repo, "error": exc.message, "hint": exc.hint})
    out["models"] = states
    if req.built_image is not None:  # a lane launched from a Nix-built image: which ID this host holds
        from ..images.node import image_state

        out["image_state"] = image_state(req.built_image)
    if req.memory:
        from ..facts.memory import read_memory

        try:
            out["memory"] = to_jsonable(read_memory(watchdog.meminfo_source(), watchdog.shm_source()))
        except (OSError, ValueError) as exc:
            out["memory_error"] = str(exc)
    if req.ports:
        out["ports_in_use"] = ports_in_use(req.ports)
    verdicts = _kit_verdicts(req.kits)
    if verdicts:  # [[launch.trees]]: the pinned kit checkouts, judged as verify does
        out["kits"] = [v.to_dict() for v in verdicts]
    if req.display:  # [launch.display]: the DRM card and nvidia_drm, read, never changed
        dev = DisplayDevice.from_dict(req.display)
        facts = read_display(dev, req.display_parameters_dir or NVIDIA_DRM_PARAMETERS)
        out["display"] = {**to_jsonable(facts), "problems": display_problems(dev, facts)}
    if req.cache_seed:  # [launch.cache_seed]: the verified tree, made once when launch asks
        from ..fleet.cacheseed import CacheSeed
        from .seedprep import seed_facts

        unpinned = [v for v in verdicts if v.pin == req.seed_pin and not v.ok]
        if unpinned:  # the lock and CACHE_ROOTS are read only from the checkout as pinned
            v = unpinned[0]
            out["cache_seed"] = {"ok": False, "problem": f"its lock is not read: {v.summary()}",
                                 "hint": v.fix}  # fmt: skip
        else:
            out["cache_seed"] = seed_facts(CacheSeed.from_dict(req.cache_seed), req.seed_prepare)
    return out


def _kit_verdicts(kits: KitsRequest | None) -> list:
    """verify's verdict on each kit checkout the request names (its kits): [] when it names none."""
    if kits is None or not kits.checkouts:
        return []
    from ..fleet.kittrees import KitCheckout
    from ..stage.kits import verify_kits

    checkouts = [KitCheckout.from_dict(k) for k in kits.checkouts]
    return verify_kits(checkouts, Path(kits.state_dir), kits.host, kits.lane)


def start(req: StartRequest) -> dict:
    """Refuse if this lane's rank already runs or its kit checkouts (the request's kits) are not
    as pinned; before_serve (receipt roots, then the cache seed); start, record."""
    spec = LaunchSpec.from_dict(req.spec)
    state_dir = Path(spec.state_dir)
    key = apikeys.read_key(state_dir, spec.lane)
    if key:  # into the 0600 env file / the process env only: never the spec, argv or a record
        spec = dataclasses.replace(spec, env={**spec.env, **dict.fromkeys(apikeys.ENGINE_ENV, key)})
    runtime = runtime_for(spec.runtime)
    for rec in records.load_all(state_dir, spec.lane):
        st = runtime_for(rec.runtime).state(rec) if rec.rank == spec.rank else None
        if st is not None and st.alive:
            raise SparkfleetError(
                f"{spec.lane} rank {spec.rank} is already running on {spec.host} ({rec.name})"
                + ("" if st.running else f": {st.detail}"),
                hint=f"sparkfleet stop {spec.lane}",
                exit_code=ExitCode.REFUSED,  # an occupied host (docs/cli.md "Exit codes")
            )
    # The kit's files the rank will run ([[launch.trees]]) are judged again here, just before they
    # run: the probe's verdict is from before the preflight, and the checkout may change since.
    changed = [v for v in _kit_verdicts(req.kits) if not v.ok]
    if changed:
        raise SparkfleetError(
            f"{spec.host}: the kit is not there as pinned; {changed[0].summary()}; nothing was started",
            hint=changed[0].fix,
            exit_code=ExitCode.REFUSED,
        )
    cleared = clear_receipts(spec.receipt_roots, base=spec.cache_dir, state_dir=spec.state_dir)
    boot_cache = cache_state(spec) if spec.boot_cache_dir else None
    seeded = None
    if spec.cache_seed is not None:  # the kit's kernel cache, as each of its runs starts with it
        from .seedprep import seed_cache

        seeded = to_jsonable(seed_cache(spec.cache_seed, spec.cache_dir))
    rec = runtime.start(spec)
    rec = dataclasses.replace(rec, receipts_cleared=tuple(c.path for c in cleared if c.existed))
    records.save(state_dir, rec)
    records.last_run_path(state_dir, spec.lane, spec.rank).unlink(missing_ok=True)  # a new run began
    out = {"record": to_jsonable(rec), "receipts": to_jsonable(cleared), "boot_cache": boot_cache}
    if seeded is not None:
        out["cache_seed"] = seeded
    wd = req.watchdog
    if wd is not None:
        out["watchdog"] = watchdog.spawn(state_dir, spec.lane, wd.floor, wd.interval, spec.stop_timeout_s)
    return out


def _state_json(rec: records.LaunchRecord) -> dict:
    st = runtime_for(rec.runtime).state(rec)
    return {
        "record": to_jsonable(rec),
        "running": st.running,
        "returncode": st.returncode,
        "detail": st.detail,
        "orphan_pid": st.orphan_pid,
    }


def status(req: StatusRequest) -> dict:
    """The lane's recorded ranks now; when none is recorded, how its last run ended (`last`)."""
    recs = records.load_all(Path(req.state_dir), req.lane)
    out: dict[str, Any] = {"ranks": [_state_json(r) for r in recs]}
    if not recs:
        out["last"] = [
            {"record": to_jsonable(rec), "stopped": to_jsonable(note)}
            for rec, note in records.load_last_stops(Path(req.state_dir), req.lane)
        ]
    memstop = watchdog.read_memstop(Path(req.state_dir), req.lane)
    if memstop:
        out["memstop"] = memstop
    return out


def stop(req: StopRequest) -> dict:
    """Stop every rank of the lane this node's records name; retire the records of stopped ranks.

    A retired record keeps the last run's log findable for `sparkfleet logs`: a container's log
    is copied to the rank's log file first, since stopping removes the container.
    """
    state_dir = Path(req.state_dir)
    watchdog.stop_watchdog(state_dir, req.lane)
    out = []
    for rec in records.load_all(state_dir, req.lane):
        runtime = runtime_for(rec.runtime)
        if rec.runtime != "process":
            try:
                data, _ = runtime.read_log(rec, 0, 1 << 30)
                write_bytes(Path(rec.log_path), data, mode=0o600)
            except (OSError, subprocess.SubprocessError):
                pass  # the log is a courtesy; stopping must not depend on it
        res = runtime.stop(rec, req.timeout)
        if res.stopped:
            note = records.StopNote(time.time(), req.by or "sparkfleet", res.detail)
            records.retire(state_dir, rec, note)
        out.append(to_jsonable(res))
    return {"stopped": out}


def watch(req: WatchRequest) -> dict:
    """One readiness poll of a rank: new log bytes since `offset`, liveness, and (head) HTTP probes."""
    recs = [r for r in records.load_all(Path(req.state_dir), req.lane) if r.rank == req.rank]
    if not recs:
        return {"found": False}
    rec = recs[0]
    runtime = runtime_for(rec.runtime)
    data, offset = runtime.read_log(rec, req.offset, req.max_bytes)
    st = runtime.state(rec)
    key = _lane_key(req.state_dir, req.lane)
    out: dict[str, Any] = {
        "found": True,
        "data": apikeys.scrub(data.decode("utf-8", errors="replace"), key),
        "offset": offset,
        "running": st.running,
        "returncode": st.returncode,
    }
    if req.port and st.running:
        out["health"], _ = _http_status(req.port, "/health")
        out["models_status"], models = _http_status(req.port, "/v1/models", key=key)
        if isinstance(models, dict):
            out["models"] = [m.get("id") for m in models.get("data", []) if isinstance(m, dict)]
        if out["health"] == 200 and out["models_status"] == 200:  # up: does it refuse the keyless?
            out["keyless_status"], _ = _http_status(req.port, apikeys.KEYLESS_PROBE, data=b"{}")
    return out


def logs(req: LogsRequest) -> dict:
    """The last `lines` lines of every recorded rank's log on this node: the running run's, else the
    last stopped run's (`stopped` names those ranks, `log_paths` where each log is)."""
    state_dir = Path(req.state_dir)
    out, stopped, paths = {}, [], {}
    live = records.load_all(state_dir, req.lane)
    for rec in live or records.load_last(state_dir, req.lane):
        if not live:
            stopped.append(str(rec.rank))
        if live and rec.runtime != "process":
            data, _ = runtime_for(rec.runtime).read_log(rec, 0, 1 << 30)
        else:
            data = tail_bytes(rec.log_path)
        text = apikeys.scrub(data.decode("utf-8", errors="replace"), _lane_key(req.state_dir, req.lane))
        out[str(rec.rank)] = "\n".join(text.splitlines()[-req.lines :])
        paths[str(rec.rank)] = rec.log_path
    return {"logs": out, "stopped": stopped, "log_paths": paths}


def doctor(req: DoctorRequest) -> dict:
    """Facts for `sparkfleet doctor`: disk, receipts, image, GPU, fabric, staged state, kit checkouts
    (the probe's)."""
    out = probe(req)
    hub = req.local_hub_path()
    probe_dir = next((p for p in (hub, *hub.parents) if p.exists()), Path("/"))
    usage = shutil.disk_usage(probe_dir)
    out["disk"] = {"path": str(probe_dir), "free": usage.free, "total": usage.total}
    receipts = []
    for root in req.receipt_roots:
        p = Path(root)
        if os.path.lexists(p):
            st = p.lstat()
            parent_writable = os.access(p.parent, os.W_OK)
            receipts.append(
                {"path": root, "exists": True, "uid": st.st_uid, "removable_as_me": parent_writable}
            )
        else:
            receipts.append({"path": root, "exists": False})
    out["receipts"] = receipts
    out["euid"] = os.geteuid()
    # root needs no sudo; asking anyway costs sudo's hostname lookup (seconds on a host without DNS)
    out["sudo_n"] = out["euid"] != 0 and (
        shutil.which("sudo") is not None
        and subprocess.run(["sudo", "-n", "true"], capture_output=True, stdin=subprocess.DEVNULL).returncode
        == 0
    )
    image, engine = req.image, req.runtime
    if image and engine in ("docker", "podman"):
        if shutil.which(engine) is None:
            out["image"] = {"present": False, "detail": f"{engine} not installed"}
        else:
            present = subprocess.run([engine, "image", "inspect", image], capture_output=True).returncode == 0
            out["image"] = {"present": present, "detail": image}
    if shutil.which("nvidia-smi"):
        cp = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        out["gpu"] = {
            "available": cp.returncode == 0,
            "apps": [ln for ln in cp.stdout.splitlines() if ln.strip()],
        }
    else:
        out["gpu"] = {"available": False, "apps": []}
    if req.state_dir and req.lane:
        out["ranks"] = status(StatusRequest(req.lane, req.state_dir))["ranks"]
        out["api_key"] = _auth_facts(req, any(r["running"] for r in out["ranks"]))
    out["fingerprint"] = fingerprint(FingerprintRequest(req.host, req.image))["fingerprint"]
    return out


def _auth_facts(req: DoctorRequest, serving: bool) -> dict:
    """Does this node hold the lane's key, and does its port answer /v1/models without one?"""
    try:
        key = _lane_key(req.state_dir, req.lane)
    except SparkfleetError as exc:
        return {"present": False, "error": exc.message}
    out: dict[str, Any] = {"present": key is not None}
    if serving and req.port:
        out["open_status"], _ = _http_status(req.port, "/v1/models")
        out["keyless_status"], _ = _http_status(req.port, apikeys.KEYLESS_PROBE, data=b"{}")
        if key:
            out["keyed_status"], _ = _http_status(req.port, "/v1/models", key=key)
    return out


def occupancy(req: OccupancyRequest) -> dict:
    """Every lane with a rank running on this node (from the records under state_dir/lanes/)."""
    lanes_dir = Path(req.state_dir) / "lanes"
    out = []
    for d in sorted(lanes_dir.iterdir()) if lanes_dir.is_dir() else []:
        for rec in records.load_all(lanes_dir.parent, d.name):
            if runtime_for(rec.runtime).state(rec).alive:
                out.append({"lane": rec.lane, "rank": rec.rank, "name": rec.name})
    return {"running": out}


def image_state(req: ImageStateRequest) -> dict:
    from ..images.node import image_state as state

    return state(req)


def image_pull(req: ImagePullRequest) -> dict:
    from ..images.node import image_pull as pull

    return pull(req)


def image_commit(req: ImageCommitRequest) -> dict:
    from ..images.node import image_commit as commit

    return commit(req)


def fingerprint(req: FingerprintRequest) -> dict:
    """This node's host stack, read here in one call (`sparkfleet.remote.hoststack.collect_fingerprint`)."""
    from ..remote.hosts import LocalHost
    from ..remote.hoststack import collect_fingerprint

    fp = collect_fingerprint(LocalHost(req.host or socket.gethostname()), req.image)
    return {"fingerprint": fp.to_dict()}


def host_facts(req: HostFactsRequest) -> dict:
    """Memory, NVMe, staged bytes per pin and the last measured rates (the fleet view's one read)."""
    from .hostread import host_facts as facts

    return facts(req)


def api_key(req: ApiKeyRequest) -> dict:
    """The lane's key on this node, for the controller's clients (answered on stdout, never argv)."""
    return {"key": apikeys.read_key(Path(req.state_dir), req.lane)}


def api_key_write(req: ApiKeyWriteRequest) -> dict:
    """Install the lane's key (sent on stdin) on this node: bootstrap and `keys rotate`."""
    return {"changed": apikeys.write_key(Path(req.state_dir), req.lane, req.key)}


ACTIONS: dict[str, Callable[[Any], dict]] = {
    ApiKeyRequest.ACTION: api_key,
    ApiKeyWriteRequest.ACTION: api_key_write,
    OccupancyRequest.ACTION: occupancy,
    ImageStateRequest.ACTION: image_state,
    ImageCommitRequest.ACTION: image_commit,
    ImagePullRequest.ACTION: image_pull,
    ProbeRequest.ACTION: probe,
    StartRequest.ACTION: start,
    StopRequest.ACTION: stop,
    StatusRequest.ACTION: status,
    WatchRequest.ACTION: watch,
    LogsRequest.ACTION: logs,
    DoctorRequest.ACTION: doctor,
    CanaryRequest.ACTION: canary,
    FingerprintRequest.ACTION: fingerprint,
    IncidentRequest.ACTION: incident,
    HostFactsRequest.ACTION: host_facts,
}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0] not in ACTIONS:
        unknown = f"unknown action {args[0]!r}; " if len(args) == 1 else ""
        print(f"{unknown}usage: sparkfleet agent {{{','.join(ACTIONS)}}} < request.json", file=sys.stderr)
        return 2
    try:
        answer = {"ok": True, **ACTIONS[args[0]](read_request(args[0], sys.stdin.read()))}
    except SparkfleetError as exc:
        answer = error_answer(exc)
    except KeyError as exc:  # a record in the request (a spec) without a field it needs
        answer = {
            "ok": False,
            "error": f"the {args[0]} request lacks {exc}",
            "hint": VERSION_HINT,
            "exit_code": int(ExitCode.USAGE),
        }
    except Exception as exc:  # noqa: BLE001 - one action's failure is its answer, never a dead agent
        # Whatever one action raised (a bug, a file on the node no check foresaw) is answered as that
        # action's error, so the controller (launch, the supervisor) reports it and goes on; the
        # traceback goes to the agent's stderr, for whoever debugs it.
        traceback.print_exc(file=sys.stderr)
        answer = {
            "ok": False,
            "error": f"agent {args[0]} failed on this node: {type(exc).__name__}: {exc}"[:2000],
            "hint": "a sparkfleet bug or a state on the node no check foresaw; the agent's stderr has "
            "the traceback (run the action by hand: `sparkfleet agent ACTION < request.json`)",
            "exit_code": int(ExitCode.CRASHED),
        }
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
