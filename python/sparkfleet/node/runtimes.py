"""Runtimes execute a LaunchSpec on the node they run on: docker, podman, or a plain process.

A runtime decides nothing (the spec did); it starts the rank under a sparkfleet name, returns a
LaunchRecord that identifies exactly what it started, and stops only what a record names.
Container env goes through an --env-file (0600), never argv, so values never show up in `ps`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..base import procs
from ..base.atomic import write_bytes
from ..base.errors import SparkfleetError
from ..base.selfexec import module_argv
from ..facts.display import card_gid
from ..lane.limits import limit_args, node_user
from ..lane.spec import ENV_KEY, LaunchSpec
from . import records
from .records import LaunchRecord

# A rank's log is rotated to <log>.1 past this size (process runtime; containers: --log-opt).
MAX_LOG_BYTES = 64 * 1024 * 1024


class RuntimeError_(SparkfleetError):
    """A runtime could not start, inspect or stop a rank."""


@dataclass(frozen=True)
class RankState:
    """Is a recorded rank still running, and how did it end if not."""

    running: bool
    returncode: int | None = None
    detail: str = ""
    orphan_pid: int | None = None  # the server still runs though its supervisor died (ours to stop)

    @property
    def alive(self) -> bool:
        """Something of the rank still runs here: its supervisor, or the server it left behind."""
        return self.running or self.orphan_pid is not None


@dataclass(frozen=True)
class StopResult:
    rank: int
    name: str
    was_running: bool
    stopped: bool
    detail: str


def _env_file_text(env: dict[str, str]) -> str:
    for k, v in env.items():
        if not ENV_KEY.fullmatch(k):
            raise RuntimeError_(f"env name {k!r} is not a variable name; an env file would misread it")
        if "\n" in v or "\r" in v or "\0" in v:
            raise RuntimeError_(f"env {k} holds a newline or NUL; an env file cannot carry it")
    return "".join(f"{k}={v}\n" for k, v in env.items())


def container_run_argv(
    spec: LaunchSpec, engine: str, env_file: Path, user: str | None = None, display_gid: int | None = None
) -> list[str]:
    """`docker|podman run -d ...` with the flags Spark peers use, from the spec alone; `user` is
    this node's uid:gid where the recipe says container.user = "host", `display_gid` the group of
    its DRM card where the spec gives the rank one (None: a plan off the node, shown as a mark)."""
    argv = [engine, "run", "-d", "--name", spec.name]
    for k, v in spec.labels.items():
        argv += ["--label", f"{k}={v}"]
    argv += ["--network", "host", "--ipc", spec.container.ipc]
    for limit in spec.ulimits:  # the host's (fleet.toml `ulimits`): memlock=-1 is refused where hard < ∞
        argv += ["--ulimit", limit]
    argv += limit_args(spec.container, engine, spec.shm_size, spec.host, user)  # shm + [launch.container]
    argv += ["--log-opt", f"max-size={MAX_LOG_BYTES // (1024 * 1024)}m"]  # rank logs capped
    if engine == "docker":
        argv += ["--log-opt", "max-file=2"]
    if spec.gpus == "all" and engine == "docker":
        argv += ["--gpus", "all"]
    for dev in spec.devices:
        argv += ["--device", dev]
    if spec.display is not None:  # the card and its group only, never a privileged container
        gid = str(display_gid) if display_gid is not None else f"<gid of {spec.display.card} on {spec.host}>"
        argv += ["--device", spec.display.device_arg(), "--group-add", gid]
    argv += ["--env-file", str(env_file)]
    for b in spec.binds:
        argv += ["-v", b.docker_arg()]
    if spec.image is None:
        raise RuntimeError_(f"{spec.lane}: the {engine} runtime needs an image")
    if spec.entrypoint:
        argv += ["--entrypoint", spec.entrypoint]
    return [*argv, spec.image, *spec.argv]


def _started(spec: LaunchSpec, runtime: str, log: Path, **how: object) -> LaunchRecord:
    """The record of a rank just started; `how` says what identifies it (pid + ticks, or container)."""
    return LaunchRecord(
        lane=spec.lane,
        host=spec.host,
        rank=spec.rank,
        runtime=runtime,
        name=spec.name,
        log_path=str(log),
        started_at=time.time(),
        argv=spec.argv,
        env_keys=tuple(spec.env),
        binds=len(spec.binds),
        **how,  # type: ignore[arg-type]
    )


def child_path(exit_path: str) -> Path:
    """Where the supervisor leaves its serve command's identity (PID, start time, boot id)."""
    return Path(exit_path).with_suffix(".child")


def _rotate(log: Path) -> None:
    if log.exists():
        os.replace(log, log.with_name(log.name + ".1"))


class ProcessRuntime:
    """The serve command as a plain process (tests, the demo): own session, log file, exit file."""

    name = "process"

    def start(self, spec: LaunchSpec) -> LaunchRecord:
        state = Path(spec.state_dir)
        log = records.log_path(state, spec.lane, spec.rank)
        exit_file = log.with_suffix(".exit")
        log.parent.mkdir(parents=True, exist_ok=True)
        Path(spec.cache_dir).mkdir(parents=True, exist_ok=True)
        _rotate(log)
        exit_file.unlink(missing_ok=True)
        child_path(str(exit_file)).unlink(missing_ok=True)
        env = {**os.environ, **spec.env}
        rank_parent = module_argv(
            "sparkfleet.node.rank_parent", "--exit-file", str(exit_file),
            "--log", str(log), "--max-log-bytes", str(MAX_LOG_BYTES),
            "--child-file", str(child_path(str(exit_file))), "--",
        )  # fmt: skip
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [*rank_parent, *spec.argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=spec.cache_dir,
                start_new_session=True,
                close_fds=True,
            )
        return _started(
            spec,
            self.name,
            log,
            pid=proc.pid,
            start_ticks=procs.start_ticks(proc.pid),
            boot_id=procs.boot_id(),
            pgid=proc.pid,
            exit_path=str(exit_file),
        )

    def orphan(self, rec: LaunchRecord) -> int | None:
        """The rank's server PID when its supervisor is gone but the server runs on (`kill -9` of
        the supervisor): the very process the supervisor started (PID + start time + boot id from
        its child file), still in the rank's process group, which is then ours to end."""
        if rec.exit_path is None or records.is_ours(rec):
            return None
        try:
            ident = json.loads(child_path(rec.exit_path).read_text())
            child = dataclasses.replace(
                rec, pid=int(ident["pid"]), start_ticks=ident["start_ticks"], boot_id=ident["boot_id"]
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not records.is_ours(child):
            return None
        try:
            return child.pid if os.getpgid(child.pid or 0) == (rec.pgid or rec.pid) else None
        except ProcessLookupError:
            return None

    def state(self, rec: LaunchRecord) -> RankState:
        if records.is_ours(rec):
            return RankState(True)
        orphan = self.orphan(rec)
        if orphan is not None:
            why = f"supervisor dead, server alive (pid {orphan}); `sparkfleet stop` ends it"
            return RankState(False, None, why, orphan)
        try:
            info = json.loads(Path(rec.exit_path or "").read_text())
            return RankState(False, int(info["returncode"]), "exited")
        except (OSError, ValueError, KeyError, TypeError):
            return RankState(False, None, "gone (no exit status recorded)")

    def stop(self, rec: LaunchRecord, timeout: float) -> StopResult:
        """End the rank's whole process group: the supervisor and everything it started, or (its
        supervisor killed) the server left behind, found by its recorded identity."""
        pgid = rec.pgid or rec.pid
        leader = rec.pid if records.is_ours(rec) else self.orphan(rec)
        if leader is None or pgid is None:
            return StopResult(rec.rank, rec.name, False, True, "not running")
        try:
            if os.getpgid(leader) != pgid:
                return StopResult(rec.rank, rec.name, True, False, f"pid {leader} left process group {pgid}")
        except ProcessLookupError:
            return StopResult(rec.rank, rec.name, False, True, "not running")
        res = self._end_group(rec, pgid, timeout)
        if leader != rec.pid:
            why = f"{res.detail}: server pid {leader}, its supervisor had died"
            return dataclasses.replace(res, detail=why)
        return res

    def _end_group(self, rec: LaunchRecord, pgid: int, timeout: float) -> StopResult:
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and procs.group_members(pgid):
                time.sleep(0.05)
            if not procs.group_members(pgid):
                return StopResult(rec.rank, rec.name, True, True, f"stopped ({signal.Signals(sig).name})")
        left = procs.group_members(pgid)
        return StopResult(rec.rank, rec.name, True, not left, f"still running: {left}" if left else "stopped")

    def read_log(self, rec: LaunchRecord, offset: int, max_bytes: int) -> tuple[bytes, int]:
        try:
            with open(rec.log_path, "rb") as fh:
                if os.fstat(fh.fileno()).st_size < offset:
                    offset = 0  # rotated (the cap): read the new file from its start
                fh.seek(offset)
                data = fh.read(max_bytes)
        except OSError:
            return b"", offset
        return data, offset + len(data)


class ContainerRuntime:
    """docker or podman: `run -d` under the rank's name, stopped by the recorded container ID."""

    def __init__(self, engine: str) -> None:
        self.name = engine
        self.engine = engine

    def _engine(self) -> str:
        path = shutil.which(self.engine)
        if path is None:
            raise RuntimeError_(
                f"{self.engine} is not installed on this node", hint="install it or pick another runtime"
            )
        return path

    def _run(self, argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def image_present(self, image: str) -> bool:
        return self._run([self._engine(), "image", "inspect", image]).returncode == 0

    def start(self, spec: LaunchSpec) -> LaunchRecord:
        engine = self._engine()
        state = Path(spec.state_dir)
        log = records.log_path(state, spec.lane, spec.rank)
        env_file = log.with_suffix(".env")
        Path(spec.cache_dir).mkdir(parents=True, exist_ok=True)
        write_bytes(env_file, _env_file_text(spec.env).encode(), mode=0o600)
        if spec.image is None or not self.image_present(spec.image):
            raise RuntimeError_(
                f"image {spec.image} is not present on {spec.host}",
                hint="load the pinned image on every node (`sparkfleet doctor LANE` shows which lack it)",
            )
        gid = card_gid(spec.display.card) if spec.display is not None else None
        argv = container_run_argv(spec, self.engine, env_file, node_user(), gid)
        cp = self._run([engine, *argv[1:]])
        if cp.returncode != 0:
            raise RuntimeError_(f"{self.engine} run {spec.name} failed: {cp.stderr.strip()}")
        return _started(spec, self.name, log, container_id=cp.stdout.strip().splitlines()[-1])

    def _inspect(self, rec: LaunchRecord) -> dict | None:
        cp = self._run([self._engine(), "inspect", rec.container_id or "-"])
        if cp.returncode != 0:
            return None
        try:
            return json.loads(cp.stdout)[0]
        except (ValueError, IndexError):
            return None

    def state(self, rec: LaunchRecord) -> RankState:
        info = self._inspect(rec)
        if info is None:
            return RankState(False, None, "container gone")
        st = info.get("State", {})
        return RankState(
            bool(st.get("Running")), None if st.get("Running") else st.get("ExitCode"), st.get("Status", "")
        )

    def stop(self, rec: LaunchRecord, timeout: float) -> StopResult:
        info = self._inspect(rec)
        if info is None:
            return StopResult(rec.rank, rec.name, False, True, "container gone")
        labels = (info.get("Config") or {}).get("Labels") or {}
        if labels.get("sparkfleet.lane") != rec.lane:
            return StopResult(
                rec.rank, rec.name, True, False, "container does not carry our lane label; left alone"
            )
        engine = self._engine()
        self._run([engine, "stop", "-t", str(int(timeout)), rec.container_id or "-"], timeout=timeout + 30)
        cp = self._run([engine, "rm", "-f", rec.container_id or "-"])
        Path(rec.log_path).with_suffix(".env").unlink(missing_ok=True)  # it holds the lane's secrets
        return StopResult(rec.rank, rec.name, True, cp.returncode == 0, cp.stderr.strip() or "removed")

    def read_log(self, rec: LaunchRecord, offset: int, max_bytes: int) -> tuple[bytes, int]:
        cp = subprocess.run(
            [self._engine(), "logs", rec.container_id or "-"],
            capture_output=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        data = (cp.stdout + cp.stderr)[offset : offset + max_bytes]
        return data, offset + len(data)


def runtime_for(name: str) -> ProcessRuntime | ContainerRuntime:
    if name == "process":
        return ProcessRuntime()
    if name in ("docker", "podman"):
        return ContainerRuntime(name)
    raise RuntimeError_(f"unknown runtime {name!r}", hint="docker, podman or process")
