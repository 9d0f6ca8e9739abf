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


def assign_shares(files: Iterable[tuple[str, int, str]], hosts: int) -> dict[str, int]:
    """Map each (hub-relative path, size, content key) to a share 0..hosts-1.

    Files with one content key (the same sha256 in two repos' blob stores) go to one share, so the
    NAS sends those bytes once and the second copy is a verified local hardlink. Largest content
    first onto the lightest share; ties by key, so every host computes the same split.
    """
    if hosts < 1:
        raise ValueError("fan-out needs at least one host")
    groups: dict[str, tuple[int, list[str]]] = {}
    for rel, size, key in sorted(set(files)):
        groups.setdefault(key, (size, []))[1].append(rel)
    loads = [0] * hosts
    shares: dict[str, int] = {}
    for _key, (size, rels) in sorted(groups.items(), key=lambda g: (-g[1][0], g[0])):
        target = min(range(hosts), key=lambda i: (loads[i], i))
        for rel in rels:
            shares[rel] = target
        loads[target] += size
    return shares


def content_key(rel: str, address: tuple[str, str] | None) -> str:
    """What makes two files the same content for fan-out: their sha256 address, else their path."""
    return address[1] if address and address[0] == "sha256" else rel


@dataclass(frozen=True)
class Pull:
    """One file a host pulls in wave 2: from whom first (then the others, then the NAS)."""

    host: str
    rel: str
    size: int
    seed: str  # the host that staged it from the NAS in wave 1


def fanout_plan(
    files: list[tuple[str, int, str]], hosts: list[str]
) -> tuple[dict[str, list[str]], list[Pull]]:
    """(wave 1: host → files it places from the NAS, wave 2: every pull between peers)."""
    shares = assign_shares(files, len(hosts))
    sizes = {rel: size for rel, size, _ in files}
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
