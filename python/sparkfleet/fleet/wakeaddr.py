"""Where a Wake-on-LAN packet may go: `wol_broadcast` in hosts/fleet.toml, checked as a broadcast.

`inventory check` refuses a bad `wol_broadcast` before `power on` ever sends a packet.

A magic packet sent to a unicast address reaches at most that one host, never the sleeping one;
an address that is not an IPv4 address at all fails only when the packet is sent. So the value is
either the limited broadcast `255.255.255.255` (the LAN the sender is on), or a subnet's directed
broadcast written with its prefix (`10.0.0.255/24`): without the prefix, `10.0.0.255` may be a
host's own address (in a /23), and nothing could tell the two apart.
"""

from __future__ import annotations

import ipaddress

LIMITED_BROADCAST = "255.255.255.255"
EXAMPLE = "255.255.255.255, or a subnet's broadcast with its prefix, e.g. 10.0.0.255/24"


def broadcast_problem(value: str) -> str | None:
    """What is wrong with `value` as a `wol_broadcast`, or None."""
    addr, slash, prefix = value.partition("/")
    try:
        ip = ipaddress.IPv4Address(addr)
    except ValueError:
        return f"{value!r} is not an IPv4 address"
    if not slash:
        if addr == LIMITED_BROADCAST:
            return None
        return (
            f"{value!r} is written without its prefix, so it cannot be told from a host's own address "
            "(a packet to a host's address never reaches the sleeping one)"
        )
    if not prefix.isdigit() or not 8 <= int(prefix) <= 30:
        return f"{value!r}: the prefix must be 8 to 30"
    net = ipaddress.IPv4Network(f"{addr}/{prefix}", strict=False)
    if ip != net.broadcast_address:
        return f"{value!r} is a host address of {net}, not its broadcast address {net.broadcast_address}"
    return None


def broadcast_address(value: str | None) -> str:
    """The address the packet goes to (the prefix dropped); the limited broadcast when unset."""
    return (value or LIMITED_BROADCAST).partition("/")[0]
