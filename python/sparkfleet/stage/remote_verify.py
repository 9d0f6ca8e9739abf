"""`verify HOST` checks HOST's own tree, on HOST: over ssh like `stage HOST`, or here for this machine.

Why on the host: the local hub a verify must read is the node's NVMe, not the operator's disk.
The coordinator runs `sparkfleet verify HOST --here --json` on each host (argv quoted by
SshHost) and collects the JSON answers; ssh's own failure becomes HostUnreachable (exit 4).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..base.errors import SparkfleetError
from ..remote.hosts import HostUnreachable, LocalHost, check_reachable, connect, fan_out
from .remote import is_this_host, sparkfleet_argv

if TYPE_CHECKING:  # annotations only: `stage --source/--dest` reads no inventory
    from ..fleet.inventory import Inventory


@dataclass(frozen=True)
class VerifyOptions:
    """The `verify` options a coordinator forwards to each host."""

    lane: str | None = None
    verify_mode: str = "sample"
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    ssh_config: Path | None = None

    def argv(self) -> list[str]:
        out = ["--full"] if self.verify_mode == "full" else []
        if self.lane:
            out += ["--lane", self.lane]
        for pattern in self.include:
            out += ["--include", pattern]
        for pattern in self.exclude:
            out += ["--exclude", pattern]
        return out


@dataclass
class HostVerify:
    """One host's verify answer (its JSON report), or why there is none."""

    host: str
    ok: bool = False
    report: dict | None = None
    error: str | None = None
    hint: str | None = None
    exit_code: int | None = None
    ran_on: list[str] = field(default_factory=list)  # the argv, as run on the host


def verify_host(inv: Inventory, host_name: str, options: VerifyOptions) -> HostVerify:
    host = inv.host(host_name)
    runner = LocalHost(host.name) if is_this_host(host) else connect(host, options.ssh_config)
    argv = [
        *sparkfleet_argv(runner), "--root", str(inv.root.resolve()),
        "verify", host_name, "--here", "--json", *options.argv(),
    ]  # fmt: skip
    out = HostVerify(host_name, ran_on=argv)
    try:
        res = check_reachable(runner.run(argv, timeout=6 * 3600))
    except HostUnreachable as exc:
        out.error, out.hint, out.exit_code = exc.message, exc.hint, int(exc.exit_code)
        return out
    try:
        doc = json.loads(res.stdout)
    except ValueError:
        tail = (res.stderr.strip().splitlines() or ["no output"])[-1]
        out.error = f"{host_name}: sparkfleet verify gave no report (exit {res.returncode}): {tail}"
        out.hint = "is sparkfleet installed on the host? $SPARKFLEET_REMOTE names the remote command"
        out.exit_code = res.returncode or 1
        return out
    if "error" in doc and "repos" not in doc:
        out.error, out.hint, out.exit_code = f"{host_name}: {doc['error']}", doc.get("hint"), doc.get("code")
        return out
    out.report, out.ok, out.exit_code = doc, bool(doc.get("ok")), res.returncode
    return out


def verify_hosts(inv: Inventory, hosts: list[str], options: VerifyOptions) -> list[HostVerify]:
    """Verify every host on the host itself, all at once."""
    if not hosts:
        raise SparkfleetError("no host to verify")
    return fan_out(lambda h: verify_host(inv, h, options), hosts)
