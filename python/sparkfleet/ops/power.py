"""`sparkfleet power on|status HOST`: Wake-on-LAN for a Spark that is off, then wait for its ssh.

Why: the night's Aiden lane "needs dgx3/4 powered and dgx1/2 freed". A host that does not answer
ssh is shown as off (or unreachable) by `power status`, `status` and `doctor`; `power on` sends the
magic packet to the host's `mac` (hosts/fleet.toml) as a UDP broadcast — six 0xFF bytes then the
MAC sixteen times, the format every NIC's WoL filter matches (Debian's `wakeonlan` sends the same
to port 9) — and waits until ssh answers. Python's socket module sends it: no extra package.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..base.errors import ExitCode, SparkfleetError
from ..fleet.inventory import Host, Inventory
from ..fleet.wakeaddr import LIMITED_BROADCAST, broadcast_address
from ..remote.hosts import connect

WOL_PORT = 9  # discard: what wakeonlan/etherwake use by default
_MAC = re.compile(r"^([0-9A-Fa-f]{2})([:-]?)([0-9A-Fa-f]{2})(\2[0-9A-Fa-f]{2}){4}$")
SSH_PROBE_TIMEOUT = 12.0


def parse_mac(mac: str) -> bytes:
    """aa:bb:cc:dd:ee:ff (or aa-bb-..., or aabbccddeeff) → 6 bytes; refuses anything else."""
    if not _MAC.fullmatch(mac.strip()):
        raise SparkfleetError(f"{mac!r} is not a MAC address", hint="write it as aa:bb:cc:dd:ee:ff")
    return bytes.fromhex(re.sub(r"[:-]", "", mac.strip()))


def magic_packet(mac: str) -> bytes:
    """The Wake-on-LAN payload: FF x 6, then the MAC 16 times (102 bytes)."""
    return b"\xff" * 6 + parse_mac(mac) * 16


def send_magic_packet(mac: str, broadcast: str = LIMITED_BROADCAST, port: int = WOL_PORT) -> int:
    """Broadcast the magic packet for `mac` over UDP; returns the bytes sent."""
    payload = magic_packet(mac)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        return s.sendto(payload, (broadcast, port))


@dataclass(frozen=True)
class PowerState:
    host: str
    on: bool
    detail: str
    mac: str | None = None

    def line(self) -> str:
        return f"{self.host}: {'on' if self.on else 'off'} ({self.detail})"


def ssh_answers(host: Host, timeout: float = SSH_PROBE_TIMEOUT) -> tuple[bool, str]:
    """Whether `host` runs a command over ssh now, and the reason when it does not."""
    try:
        res = connect(host).run(["true"], timeout=timeout)
    except (OSError, SparkfleetError) as exc:
        return False, str(getattr(exc, "message", exc))
    if res.returncode == 0:
        return True, "ssh answers"
    err = (res.stderr.strip().splitlines() or [f"ssh exit {res.returncode}"])[-1]
    return False, f"no ssh: {err}"


def power_status(inv: Inventory, name: str) -> PowerState:
    """On when ssh answers; otherwise off (powered off, or unreachable: ssh cannot tell them apart)."""
    host = inv.host(name)
    up, why = ssh_answers(host)
    detail = why if up else f"powered off or unreachable: {why}"
    return PowerState(name, up, detail, host.mac)


def power_on(
    inv: Inventory,
    name: str,
    timeout_s: float = 600.0,
    poll_s: float = 5.0,
    on_event: Callable[[str], None] = lambda _m: None,
    clock: Callable[[], float] = time.monotonic,
) -> PowerState:
    """Wake `name` (unless ssh already answers) and wait until its ssh does; UNREACHABLE on timeout."""
    host = inv.host(name)
    up, why = ssh_answers(host)
    if up:
        return PowerState(name, True, "already on: ssh answers", host.mac)
    if not host.mac:
        raise SparkfleetError(
            f"{name}: no answer over ssh ({why}) and no `mac` in hosts/fleet.toml to wake it with",
            hint=f'add mac = "aa:bb:cc:dd:ee:ff" (its LAN NIC) to [hosts.{name}], or power it on by hand',
            exit_code=ExitCode.UNREACHABLE,
        )
    broadcast = broadcast_address(host.wol_broadcast)  # inventory check proved it a broadcast
    try:
        send_magic_packet(host.mac, broadcast)
    except OSError as exc:  # no route, no interface up: a clear line, never a traceback
        raise SparkfleetError(
            f"{name}: the Wake-on-LAN packet to {broadcast}:{WOL_PORT} could not be sent: {exc}",
            hint=f"check wol_broadcast of [hosts.{name}] in hosts/fleet.toml and this machine's network",
            exit_code=ExitCode.UNREACHABLE,
        ) from None
    on_event(f"{name}: Wake-on-LAN magic packet for {host.mac} sent to {broadcast}:{WOL_PORT}")
    start = clock()
    while clock() - start < timeout_s:
        time.sleep(poll_s)
        up, why = ssh_answers(host)
        if up:
            return PowerState(name, True, f"woke: ssh answers after {clock() - start:.0f} s", host.mac)
        on_event(f"{name}: waiting for ssh ({why})")
    raise SparkfleetError(
        f"{name}: woken with Wake-on-LAN ({host.mac}) but ssh did not answer within {timeout_s:g} s: {why}",
        hint="is Wake-on-LAN enabled in its firmware/NIC (ethtool -s IF wol g)? is the MAC its LAN NIC's?",
        exit_code=ExitCode.UNREACHABLE,
    )
