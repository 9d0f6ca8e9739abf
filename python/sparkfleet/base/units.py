"""One way to print a physical figure, for every verb: a reader never meets `G/s` or a bare number.

- a byte rate (bytes/s): `GB/s` (decimal, as drives and memory are rated), `MB/s` below 1 GB/s;
- a link rate, given in bytes/s as every figure is stored: `Gb/s` (network links are rated in bits);
- a compute rate (FLOP/s): `TFLOP/s`;
- an amount of data: `KiB`/`MiB`/`GiB` (binary, as `du` and the staging lines print it);
- an amount received over the wire: `kB`/`MB`/`GB` (decimal).
"""

from __future__ import annotations

from collections.abc import Callable


def byte_rate(bps: float | None) -> str:
    """bytes/s as GB/s (MB/s below 1 GB/s)."""
    if bps is None:
        return "—"
    if abs(bps) < 1e9:
        return f"{bps / 1e6:.1f} MB/s"
    return f"{bps / 1e9:.2f} GB/s"


def link_rate(bps: float | None) -> str:
    """A link's rate, stored in bytes/s, as Gb/s (200 GbE reads `200 Gb/s`)."""
    if bps is None:
        return "—"
    return f"{bps * 8 / 1e9:g} Gb/s"


def flop_rate(flops: float | None) -> str:
    """FLOP/s as TFLOP/s."""
    if flops is None:
        return "—"
    return f"{flops / 1e12:.1f} TFLOP/s"


def human_bytes(n: float) -> str:
    """An amount of data in binary units (B, KiB, MiB, GiB, TiB)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def wire_bytes(n: float) -> str:
    """Bytes received over the network, decimal (kB, MB, GB)."""
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


# A figure's kind (how a host kind's figure or a measurement is named) -> its formatter.
BY_UNIT: dict[str, Callable[[float | None], str]] = {
    "B/s": byte_rate,
    "link": link_rate,
    "FLOP/s": flop_rate,
}
