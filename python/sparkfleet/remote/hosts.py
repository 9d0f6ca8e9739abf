"""Running commands on fleet hosts: LocalHost and SshHost behind one interface (run, stream).

Commands are argv lists, always. OpenSSH joins its trailing arguments into one string for the
remote shell, so SshHost quotes each argument with shlex.quote (shlex.join) and nothing from the
inventory is ever pasted into a shell string. BatchMode=yes: a host that wants a password or a
host-key answer fails fast instead of hanging a launch.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from ..base.errors import ExitCode, SparkfleetError

if TYPE_CHECKING:  # annotations only: staging imports fan_out, and direct mode reads no inventory
    from ..fleet.inventory import Host

log = logging.getLogger(__name__)  # `sparkfleet -v` shows each command sent to a host

# How sparkfleet is started on a remote host (an argv prefix; the flake puts `sparkfleet` on PATH).
REMOTE_COMMAND_ENV = "SPARKFLEET_REMOTE"

# OpenSSH exits 255 when the connection itself failed (unreachable, auth, host key).
SSH_CONNECT_FAILED = 255
# Loopback is this machine: no ssh needed (the demo fleet lives on one machine).
LOCAL_ADDRESSES = ("localhost", "local", "127.0.0.1", "::1")


T = TypeVar("T")
R = TypeVar("R")

# At most this many hosts (or items) are worked on at once: a fleet is a handful of hosts, and an
# operator's machine opening one ssh session per host is the cost that bounds it.
FAN_OUT_LIMIT = 8


def fan_out(fn: Callable[[T], R], items: Iterable[T], limit: int = FAN_OUT_LIMIT) -> list[R]:
    """`fn` over every item at once (threads, at most `limit`), results in the items' order whatever
    order they finish in. One item, or a limit of 1, runs inline: no pool for nothing to share.

    The one fan-out of the package: every "ask all hosts" goes through it, so the width and the
    ordering rule are decided once. An exception from `fn` propagates (after the others finish);
    callers that must record a host's failure and go on catch it inside `fn`.
    """
    items = list(items)
    if limit <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(limit, len(items))) as pool:
        return list(pool.map(fn, items))


class HostUnreachable(SparkfleetError):
    """ssh could not reach or log into the host."""

    exit_code = ExitCode.UNREACHABLE


@dataclass(frozen=True)
class RunResult:
    """A finished command: exit code and captured output (text)."""

    host: str
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class HostRunner(Protocol):
    """What every verb needs from a host: run a command, or stream its output lines."""

    name: str

    def run(
        self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None
    ) -> RunResult: ...

    def stream(self, argv: Sequence[str]) -> Iterator[Iterator[str]]: ...


def _run(
    host: str, shown: Sequence[str], argv: list[str], input: str | None, timeout: float | None
) -> RunResult:
    log.info("%s$ %s", host, shlex.join(shown))
    log.debug("  full argv: %s", shlex.join(argv))
    try:
        cp = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return RunResult(host, tuple(shown), 124, out, f"timed out after {timeout} s")
    except FileNotFoundError as exc:
        return RunResult(host, tuple(shown), 127, "", str(exc))
    return RunResult(host, tuple(shown), cp.returncode, cp.stdout, cp.stderr)


class StreamLines:
    """The output lines of a streamed command; `returncode` once they ran out (255: ssh failed)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc

    def __iter__(self) -> Iterator[str]:
        return iter(self.proc.stdout.readline, "")  # type: ignore[union-attr]

    @property
    def returncode(self) -> int | None:
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            return None


@contextmanager
def _stream(argv: list[str]) -> Iterator[StreamLines]:
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True
    )
    try:
        yield StreamLines(proc)
    finally:
        stop_process(proc)


def stop_process(proc: subprocess.Popen, grace_s: float = 0.0) -> None:
    """End a process we started (by its PID, never by name): wait `grace_s` for it to finish on its
    own, then SIGTERM, then SIGKILL after 5 s; close its pipes."""
    if grace_s:
        with suppress(subprocess.TimeoutExpired):
            proc.wait(grace_s)
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for pipe in (proc.stdout, proc.stderr):
        if pipe:
            pipe.close()


@dataclass(frozen=True)
class LocalHost:
    """The machine sparkfleet runs on."""

    name: str

    def run(
        self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None
    ) -> RunResult:
        return _run(self.name, argv, list(argv), input, timeout)

    def stream(self, argv: Sequence[str]):
        log.info("%s$ %s", self.name, shlex.join(argv))
        return _stream(list(argv))


@dataclass(frozen=True)
class SshHost:
    """A fleet host reached with the OpenSSH client, per-host user/port/key from the inventory."""

    name: str
    address: str
    user: str
    port: int = 22
    key: Path | None = None
    config: Path | None = None  # an ssh_config (-F); the operator's ~/.ssh/config otherwise
    connect_timeout: int = 10

    def ssh_argv(self, argv: Sequence[str]) -> list[str]:
        """`ssh ... user@address -- <quoted argv>`: the remote shell sees each argument quoted."""
        out = ["ssh"]
        if self.config is not None:
            out += ["-F", str(self.config)]
        out += [
            "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={self.connect_timeout}",
            "-o", "ServerAliveInterval=15",
            "-p", str(self.port),
            "-l", self.user,
        ]  # fmt: skip
        if self.key is not None:
            out += ["-i", str(self.key), "-o", "IdentitiesOnly=yes"]
        return [*out, self.address, "--", shlex.join(argv)]

    def run(
        self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None
    ) -> RunResult:
        return _run(self.name, argv, self.ssh_argv(argv), input, timeout)

    def stream(self, argv: Sequence[str]):
        log.info("%s$ %s", self.name, shlex.join(argv))
        log.debug("  full argv: %s", shlex.join(self.ssh_argv(argv)))
        return _stream(self.ssh_argv(argv))


def connect(host: Host, ssh_config: Path | None = None) -> LocalHost | SshHost:
    """The runner for an inventory host: LocalHost for `localhost`, SshHost otherwise.

    `ssh_config` defaults to $SPARKFLEET_SSH_CONFIG (so a test fleet or a bastion setup can be
    described in one file without touching ~/.ssh/config).
    """
    if host.address in LOCAL_ADDRESSES:
        return LocalHost(host.name)
    env_config = os.environ.get("SPARKFLEET_SSH_CONFIG")
    config = ssh_config or (Path(env_config) if env_config else None)
    return SshHost(host.name, host.address, host.ssh_user, host.ssh_port, host.ssh_key, config)


def remote_sparkfleet() -> list[str]:
    """The argv prefix that runs sparkfleet on a remote host: $SPARKFLEET_REMOTE, else `sparkfleet`."""
    return shlex.split(os.environ.get(REMOTE_COMMAND_ENV, "sparkfleet"))


def check_reachable(result: RunResult) -> RunResult:
    """Turn ssh's own failure (exit 255) into HostUnreachable; leave the command's result alone."""
    if result.returncode == SSH_CONNECT_FAILED:
        detail = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "no output"
        raise HostUnreachable(
            f"{result.host}: ssh failed: {detail}",
            hint=f"check that {result.host} is up and `ssh {result.host} true` works without a prompt",
        )
    return result
