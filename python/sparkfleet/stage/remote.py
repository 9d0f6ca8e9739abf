"""Staging from anywhere: run `sparkfleet stage HOST --here --events` on HOST and follow its events.

The coordinator never ships logic as shell strings: it runs the same sparkfleet on each host
(the flake pins one version for the fleet) as an argv, over OpenSSH for remote hosts
(`hosts.SshHost`, quoted with shlex) or as a subprocess for this machine, and reads the JSON-lines
events (`events.py`) that drive the combined progress view. Several hosts run in parallel; with
fan-out (`fanout.py`) in two waves: each host takes its share from the NAS, then the rest from
its peers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .. import __version__
from ..base.errors import ExitCode, SparkfleetError
from ..base.selfexec import module_argv
from ..remote.deployed import not_deployed, remote_root
from ..remote.hosts import (
    LOCAL_ADDRESSES,
    SSH_CONNECT_FAILED,
    LocalHost,
    SshHost,
    StreamLines,
    connect,
    fan_out,
    remote_sparkfleet,
    stop_process,
)
from .events import parse_event
from .transport import DEFAULT_TRANSPORT, LOCAL, PeerSource, resolve_transport

if TYPE_CHECKING:  # annotations only: `stage --source/--dest` reads no inventory
    from ..fleet.inventory import Host, Inventory

THIS_HOST_ENV = "SPARKFLEET_HOST"  # names the inventory host this machine is


def is_this_host(host: Host) -> bool:
    """Whether `host` is the machine we run on (then `stage HOST` works here, without ssh)."""
    if os.environ.get(THIS_HOST_ENV) == host.name or host.address in LOCAL_ADDRESSES:
        return True
    return socket.gethostname().split(".")[0] == host.name


def sparkfleet_argv(runner: LocalHost | SshHost) -> list[str]:
    """How to start sparkfleet on the runner's host: this interpreter here, $SPARKFLEET_REMOTE there."""
    if isinstance(runner, LocalHost):
        return module_argv("sparkfleet")
    return remote_sparkfleet()


@dataclass(frozen=True)
class StageOptions:
    """The `stage` options a coordinator forwards to each host."""

    lane: str | None = None
    verify_mode: str = "sample"
    jobs: int = 4
    reserve_gib: float | None = None
    wait_seconds: float = 0.0
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    ssh_config: Path | None = None
    peer_transport: str = DEFAULT_TRANSPORT

    def argv(self) -> list[str]:
        out = ["--full"] if self.verify_mode == "full" else []
        out += ["--jobs", str(self.jobs), "--wait", str(self.wait_seconds)]
        out += ["--peer-transport", self.peer_transport]
        if self.lane:
            out += ["--lane", self.lane]
        if self.reserve_gib is not None:
            out += ["--reserve-gib", str(self.reserve_gib)]
        for pattern in self.include:
            out += ["--include", pattern]
        for pattern in self.exclude:
            out += ["--exclude", pattern]
        if self.ssh_config is not None:
            out += ["--ssh-config", str(self.ssh_config)]
        return out


def stage_argv(
    prefix: list[str],
    root: Path,
    host: str,
    options: StageOptions,
    share: tuple[int, int] | None = None,
    peers: list[str] | None = None,
    ports: list[int] | None = None,
    serve: bool = False,
) -> list[str]:
    """The argv that stages `host` on `host` and reports JSON-lines events (pure; tested).

    `serve`: instead of staging, serve the local hub to `peers` (rsyncd) until stdin closes.
    `ports`: the peers' rsync daemon ports in share order (0 in this host's own slot).
    """
    argv = [*prefix, "--root", str(root), "stage", host, "--here", "--events", *options.argv()]
    argv += ["--require-version", __version__]  # the same tool on every host, or a clear refusal
    if share is not None:
        argv += ["--share", f"{share[0]}/{share[1]}"]
    if peers:
        argv += ["--peers", ",".join(peers)]
    if ports:
        argv += ["--peer-ports", ",".join(str(p) for p in ports)]
    if serve:
        argv += ["--serve-peers"]
    return argv


def fabric_address(host: Host) -> str:
    """The address a peer's plain-TCP daemon binds to and is dialled on: the host's fabric_ip only."""
    if not host.fabric_ip:
        raise SparkfleetError(
            f"host {host.name} has no fabric_ip: the rsyncd peer transport binds to the fabric only",
            hint="set fabric_ip for every lane host in hosts/fleet.toml, or use --peer-transport ssh-fast",
        )
    return host.fabric_ip


def concrete_transport(inv: Inventory, hosts: list[str], choice: str) -> str:
    """The transport `choice` means for these hosts (`auto`: rsyncd when each has a fabric_ip)."""
    return resolve_transport(choice, all(inv.host(h).fabric_ip for h in hosts))


def check_fanout(inv: Inventory, hosts: list[str], transport: str) -> None:
    """Refuse a fan-out its hosts could not run, before any host is touched: one check for the dry
    run, the coordinator and each host, so a plan the dry run shows is one the run accepts.

    rsyncd binds each host's fabric address, so every host needs one. Otherwise peers are reached
    by their inventory address: hosts that are all this machine (the demo fleet) read each other's
    hubs in place; a loopback address beside hosts on other machines names a peer the others
    cannot reach ("localhost" on dgx2 is dgx2).
    """
    if transport == "rsyncd":
        for h in hosts:
            fabric_address(inv.host(h))
        return
    local = [h for h in hosts if inv.host(h).address in LOCAL_ADDRESSES]
    others = [h for h in hosts if h not in local]
    if local and others:
        raise SparkfleetError(
            f"fan-out: {local[0]} has a loopback address ({inv.host(local[0]).address}) while "
            f"{others[0]} is another machine, which could not pull from it",
            hint=f"give {local[0]} its network address in hosts/fleet.toml, or stage without --fanout",
        )


def peer_sources(
    inv: Inventory,
    names: list[str],
    me: str,
    ssh_config: Path | None,
    transport: str = "ssh-fast",
    ports: list[int] | None = None,
    secret: str | None = None,
) -> list[PeerSource | None]:
    """One PeerSource per lane host in share order; None in this host's own slot."""
    check_fanout(inv, names, transport)
    sources: list[PeerSource | None] = []
    for i, name in enumerate(names):
        if name == me:
            sources.append(None)
            continue
        host = inv.host(name)
        if transport == "rsyncd":
            if not ports or len(ports) != len(names):
                raise SparkfleetError("rsyncd peers need one daemon port per lane host (--peer-ports)")
            address = fabric_address(host)
            sources.append(PeerSource(name, host.local_hub, (), address, transport, ports[i], secret))
            continue
        runner = connect(host, ssh_config)
        if isinstance(runner, LocalHost):  # check_fanout: then every lane host is this machine
            sources.append(PeerSource(name, host.local_hub, (), host.address, LOCAL))
            continue
        full = runner.ssh_argv(["true"])
        ssh_opts = tuple(full[: full.index(runner.address)])
        sources.append(PeerSource(name, host.local_hub, ssh_opts, runner.address, transport))
    return sources


def serve_peers(
    inv: Inventory, me: str, names: list[str], secret: str, announce: Callable[[int], None]
) -> None:
    """This host's side of rsyncd fan-out: serve the local hub to the lane's fabric until stdin closes."""
    from .peerserve import DaemonSpec, serve  # the daemon is only needed on hosts that serve

    host = inv.host(me)
    allow = tuple(fabric_address(inv.host(n)) for n in names if n != me)
    with serve(DaemonSpec(host.local_hub, fabric_address(host), allow), secret) as (port, _pid):
        announce(port)
        sys.stdin.read()  # EOF: the coordinator is done (or gone); the daemon stops with us


@dataclass
class HostStage:
    """What one host's stage run reported."""

    host: str
    ok: bool = False
    exit_code: int | None = None
    run: dict | None = None
    error: str | None = None
    hint: str | None = None
    log: list[str] = field(default_factory=list)
    wave1: dict | None = None  # fan-out: the host's wave-1 run (its share, from the NAS)

    @property
    def nas_bytes(self) -> int:
        """What this host read from the NAS, both fan-out waves together."""
        runs = [r for r in (self.wave1, self.run) if r]
        return sum(int(r.get("nas_bytes", 0)) for r in runs)

    @property
    def log_tail(self) -> str:
        return "\n".join(self.log[-15:])


EventSink = Callable[[str, dict], None]
TRACEBACK_HEAD = "Traceback (most recent call last):"


def fold_traceback(lines: list[str]) -> tuple[list[str], str | None]:
    """(the lines without a Python traceback, the exception line it ended with, or None).

    A host's run that crashed (a bug) printed its traceback to the output the coordinator reads:
    the operator's summary and `--json`'s log get the one line that names the exception, not
    frames cut at an arbitrary tail.
    """
    if TRACEBACK_HEAD not in lines:
        return lines, None
    start = lines.index(TRACEBACK_HEAD)
    end, last, in_frames = start, None, True
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if in_frames:
            if line.startswith(" "):
                continue
            end, last, in_frames = i, line, False  # the exception line
        elif line.startswith(TRACEBACK_HEAD):
            in_frames = True  # a chained exception's traceback
        elif line.strip() and not line.startswith(("During handling", "The above exception")):
            break
    return lines[:start] + lines[end + 1 :], last


def _runner(inv: Inventory, host_name: str, ssh_config: Path | None) -> LocalHost | SshHost:
    host = inv.host(host_name)
    return LocalHost(host.name) if is_this_host(host) else connect(host, ssh_config)


@contextlib.contextmanager
def _popen(
    runner: LocalHost | SshHost, argv: list[str], first_line: str | None
) -> Iterator[subprocess.Popen]:
    """Start argv on the runner's host with a stdin pipe that first carries `first_line` (a secret:
    stdin, never argv). The caller closes stdin when the far side should stop; stopped by PID."""
    full = argv if isinstance(runner, LocalHost) else runner.ssh_argv(argv)
    proc = subprocess.Popen(
        full, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        if first_line is not None:
            proc.stdin.write(first_line + "\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
        yield proc
    finally:
        if proc.stdin and not proc.stdin.closed:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        stop_process(proc, grace_s=10)  # closing stdin asks the far side to stop


@contextlib.contextmanager
def _lines(runner: LocalHost | SshHost, argv: list[str], secret: str | None) -> Iterator[StreamLines]:
    """The run's output lines (and its exit code once they ran out); a secret goes in on stdin."""
    if secret is None:
        with runner.stream(argv) as lines:
            yield lines
        return
    with _popen(runner, argv, secret) as proc:
        proc.stdin.close()  # type: ignore[union-attr]
        yield StreamLines(proc)


def run_host_stage(
    inv: Inventory,
    host_name: str,
    argv_for: Callable[[list[str]], list[str]],
    sink: EventSink,
    ssh_config: Path | None = None,
    secret: str | None = None,
) -> HostStage:
    """Run the stage argv on `host_name` (subprocess or ssh), feeding events to `sink`."""
    runner = _runner(inv, host_name, ssh_config)
    argv = argv_for(sparkfleet_argv(runner))
    outcome = HostStage(host_name)
    with _lines(runner, argv, secret) as lines:
        for line in lines:
            event = parse_event(line)
            if event is None:
                outcome.log.append(line.rstrip("\n"))
                continue
            sink(host_name, event)
            if event["event"] == "result":
                outcome.run = event["run"]
                outcome.ok = bool(event["run"].get("ok"))
            elif event["event"] == "error":
                outcome.error, outcome.hint = event["message"], event.get("hint")
                outcome.exit_code = event.get("exit_code")
        returncode = lines.returncode
    outcome.log, crashed = fold_traceback(outcome.log)
    if outcome.run is None:
        # the host lacks the deployed tooling or this fleet's spec: say so, and how to fix it
        root = Path(argv[argv.index("--root") + 1]) if "--root" in argv else None
        seen = [*outcome.log, outcome.error or ""]
        missing = None if isinstance(runner, LocalHost) else not_deployed(host_name, argv[0], seen, root)
        if missing is not None:
            outcome.error, outcome.hint = missing.message, missing.hint
            outcome.exit_code = int(missing.exit_code)
    if outcome.run is None and outcome.error is None and crashed:
        outcome.error = f"{host_name}: sparkfleet stage crashed there: {crashed}"
        outcome.hint = f"a sparkfleet bug: `sparkfleet stage {host_name} --here` on {host_name} shows where"
        outcome.exit_code = ExitCode.CRASHED
    if outcome.run is None and outcome.error is None:
        outcome.error = f"{host_name}: stage ended without a result"
        ssh_failed = isinstance(runner, SshHost) and returncode == SSH_CONNECT_FAILED
        if ssh_failed or any(
            "Permission denied" in line or "Could not resolve" in line for line in outcome.log
        ):
            outcome.error = f"{host_name}: unreachable over ssh ({outcome.log_tail.strip() or 'ssh failed'})"
            outcome.exit_code = ExitCode.UNREACHABLE
    return outcome


def stage_hosts(
    inv: Inventory,
    hosts: list[str],
    options: StageOptions,
    sink: EventSink,
    fanout: bool = False,
) -> list[HostStage]:
    """Stage `hosts` in parallel; with `fanout`, NAS share first (wave 1), then from peers (wave 2)."""
    lock = threading.Lock()
    transport = concrete_transport(inv, hosts, options.peer_transport)
    options = dataclasses.replace(options, peer_transport=transport)
    if fanout and len(hosts) > 1:
        check_fanout(inv, hosts, options.peer_transport)  # before any host is touched

    def safe_sink(host: str, event: dict) -> None:
        with lock:
            sink(host, event)

    def wave(
        make_argv: Callable[[int, str], Callable[[list[str]], list[str]]], secret: str | None = None
    ) -> list[HostStage]:
        # every host at once (no cap): a wave's hosts wait on each other's shares (fan-out)
        return fan_out(
            lambda ih: run_host_stage(inv, ih[1], make_argv(*ih), safe_sink, options.ssh_config, secret),
            list(enumerate(hosts)),
            limit=len(hosts),
        )

    local = inv.root.resolve()

    def root(h: str) -> Path:
        """The inventory a host reads: ours here; the deployed one ($SPARKFLEET_REMOTE_ROOT) over ssh."""
        return local if is_this_host(inv.host(h)) else remote_root(local)

    if not fanout or len(hosts) == 1:
        return wave(lambda i, h: lambda prefix: stage_argv(prefix, root(h), h, options))
    first = wave(lambda i, h: lambda prefix: stage_argv(prefix, root(h), h, options, share=(i, len(hosts))))
    for outcome in first:
        if outcome.error:
            sink(outcome.host, {"event": "log", "line": f"wave 1 failed on {outcome.host}: {outcome.error}"})
    if options.peer_transport != "rsyncd":
        second = wave(lambda i, h: lambda prefix: stage_argv(prefix, root(h), h, options, peers=hosts))
    else:
        import secrets  # here, not at start-up: a plain stage never makes a secret (~10 ms of imports)

        secret = secrets.token_urlsafe(32)  # this run only; on stdin, never argv, never logged
        with serving(inv, hosts, options, secret, safe_sink, root) as ports:
            second = wave(
                lambda i, h: lambda prefix: stage_argv(prefix, root(h), h, options, peers=hosts, ports=ports),
                secret,
            )
    for before, after in zip(first, second, strict=True):
        after.wave1 = before.run
    return second


@contextlib.contextmanager
def serving(
    inv: Inventory,
    hosts: list[str],
    options: StageOptions,
    secret: str,
    sink: EventSink,
    root: Callable[[str], Path],
) -> Iterator[list[int]]:
    """Every lane host serves its hub over rsyncd for the block; yields the ports in share order.

    A host whose daemon does not come up serves nothing (port 0): its peers fall back to other
    peers and the NAS, as for a dead peer. Closing each serve session's stdin stops its daemon.
    """
    ports = [0] * len(hosts)
    with contextlib.ExitStack() as stack:
        procs = []
        for h in hosts:  # start every host's server first, then collect the ports: no serial start-up
            runner = _runner(inv, h, options.ssh_config)
            argv = stage_argv(sparkfleet_argv(runner), root(h), h, options, peers=hosts, serve=True)
            procs.append(stack.enter_context(_popen(runner, argv, secret)))
        for i, (h, proc) in enumerate(zip(hosts, procs, strict=True)):
            for line in iter(proc.stdout.readline, ""):  # type: ignore[union-attr]
                event = parse_event(line)
                if event and event["event"] == "serving":
                    ports[i] = int(event["port"])
                    break
                if event and event["event"] == "error":
                    sink(h, {"event": "log", "line": f"{h}: not serving peers: {event['message']}"})
                    break
        yield ports
