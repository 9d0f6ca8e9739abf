"""Staging from anywhere: run `sparkfleet stage HOST --here --events` on HOST and follow its events.

The coordinator never ships logic as shell strings: it runs the same sparkfleet on each host
(the flake pins one version for the fleet) as an argv, over OpenSSH for remote hosts
(`hosts.SshHost`, quoted with shlex) or as a subprocess for this machine, and reads the JSON-lines
events (`events.py`) that drive the combined progress view. Several hosts run in parallel; with
fan-out (`fanout.py`) in two waves: each host takes its share from the NAS, then the rest from
its peers.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..deployed import not_deployed, remote_root
from ..errors import ExitCode
from ..hosts import LOCAL_ADDRESSES, SSH_CONNECT_FAILED, LocalHost, SshHost, connect, remote_sparkfleet
from ..inventory import Host, Inventory
from .events import parse_event
from .transport import PeerSource

THIS_HOST_ENV = "SPARKFLEET_HOST"  # names the inventory host this machine is


def is_this_host(host: Host) -> bool:
    """Whether `host` is the machine we run on (then `stage HOST` works here, without ssh)."""
    if os.environ.get(THIS_HOST_ENV) == host.name or host.address in LOCAL_ADDRESSES:
        return True
    return socket.gethostname().split(".")[0] == host.name


def sparkfleet_argv(runner: LocalHost | SshHost) -> list[str]:
    """How to start sparkfleet on the runner's host: this interpreter here, $SPARKFLEET_REMOTE there."""
    if isinstance(runner, LocalHost):
        return [sys.executable, "-m", "sparkfleet"]
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

    def argv(self) -> list[str]:
        out = ["--verify", self.verify_mode, "--jobs", str(self.jobs), "--wait", str(self.wait_seconds)]
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
) -> list[str]:
    """The argv that stages `host` on `host` and reports JSON-lines events (pure; tested)."""
    argv = [*prefix, "--root", str(root), "stage", host, "--here", "--events", *options.argv()]
    argv += ["--require-version", __version__]  # the same tool on every host, or a clear refusal
    if share is not None:
        argv += ["--share", f"{share[0]}/{share[1]}"]
    if peers:
        argv += ["--peers", ",".join(peers)]
    return argv


def peer_sources(
    inv: Inventory, names: list[str], me: str, ssh_config: Path | None
) -> list[PeerSource | None]:
    """One PeerSource per lane host in share order; None in this host's own slot."""
    sources: list[PeerSource | None] = []
    for name in names:
        if name == me:
            sources.append(None)
            continue
        host = inv.host(name)
        runner = connect(host, ssh_config)
        if isinstance(runner, LocalHost):
            raise ValueError(f"peer {name} has a local address; fan-out peers must be reachable over ssh")
        full = runner.ssh_argv(["true"])
        ssh_opts = tuple(full[: full.index(runner.address)])
        sources.append(PeerSource(name=name, hub=host.local_hub, ssh=ssh_opts, address=runner.address))
    return sources


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

    @property
    def log_tail(self) -> str:
        return "\n".join(self.log[-15:])


EventSink = Callable[[str, dict], None]


def run_host_stage(
    inv: Inventory,
    host_name: str,
    argv_for: Callable[[list[str]], list[str]],
    sink: EventSink,
    ssh_config: Path | None = None,
) -> HostStage:
    """Run the stage argv on `host_name` (subprocess or ssh), feeding events to `sink`."""
    host = inv.host(host_name)
    runner: LocalHost | SshHost = LocalHost(host.name) if is_this_host(host) else connect(host, ssh_config)
    argv = argv_for(sparkfleet_argv(runner))
    outcome = HostStage(host_name)
    with runner.stream(argv) as lines:
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
    if outcome.run is None:
        # the host lacks the deployed tooling or this fleet's spec: say so, and how to fix it
        root = Path(argv[argv.index("--root") + 1]) if "--root" in argv else None
        seen = [*outcome.log, outcome.error or ""]
        missing = None if isinstance(runner, LocalHost) else not_deployed(host_name, argv[0], seen, root)
        if missing is not None:
            outcome.error, outcome.hint = missing.message, missing.hint
            outcome.exit_code = int(missing.exit_code)
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

    def safe_sink(host: str, event: dict) -> None:
        with lock:
            sink(host, event)

    def wave(make_argv: Callable[[int, str], Callable[[list[str]], list[str]]]) -> list[HostStage]:
        with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
            futures = [
                pool.submit(run_host_stage, inv, h, make_argv(i, h), safe_sink, options.ssh_config)
                for i, h in enumerate(hosts)
            ]
            return [f.result() for f in futures]

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
    second = wave(lambda i, h: lambda prefix: stage_argv(prefix, root(h), h, options, peers=hosts))
    return second
