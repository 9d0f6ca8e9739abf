"""Fan-out: each blob leaves the NAS once per fleet.

Every host of a lane needs the same files. They are split into one share per host, balanced by
bytes with a deterministic greedy rule, so each host computes the same split from the same NAS
without talking to the others. Wave 1: host i stages share i from the NAS. Wave 2: every host
stages the rest, pulling share j from host j over the fabric (then from any other peer, then the
NAS if peers fail), verifying what arrives exactly as it would a NAS copy.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


def assign_shares(files: Iterable[tuple[str, int]], hosts: int) -> dict[str, int]:
    """Map each (hub-relative path, size) to a share 0..hosts-1: largest first onto the lightest share."""
    if hosts < 1:
        raise ValueError("fan-out needs at least one host")
    loads = [0] * hosts
    shares: dict[str, int] = {}
    for rel, size in sorted(set(files), key=lambda f: (-f[1], f[0])):
        target = min(range(hosts), key=lambda i: (loads[i], i))
        shares[rel] = target
        loads[target] += size
    return shares


@dataclass(frozen=True)
class Pull:
    """One file a host pulls in wave 2: from whom first (then the others, then the NAS)."""

    host: str
    rel: str
    size: int
    seed: str  # the host that staged it from the NAS in wave 1


def fanout_plan(files: list[tuple[str, int]], hosts: list[str]) -> tuple[dict[str, list[str]], list[Pull]]:
    """(wave 1: host → files it takes from the NAS, wave 2: every pull between peers)."""
    shares = assign_shares(files, len(hosts))
    sizes = dict(files)
    wave1: dict[str, list[str]] = {h: [] for h in hosts}
    for rel, share in sorted(shares.items()):
        wave1[hosts[share]].append(rel)
    pulls = [
        Pull(host, rel, sizes[rel], hosts[share])
        for host in hosts
        for rel, share in sorted(shares.items())
        if hosts[share] != host
    ]
    return wave1, pulls
