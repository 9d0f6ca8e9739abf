"""Fan-out: each blob leaves the NAS once per fleet.

Every host of a lane needs the same files. They are split into one share per host, balanced by
bytes with a deterministic greedy rule, so each host computes the same split from the same NAS
without talking to the others. Wave 1: host i stages share i from the NAS. Wave 2: every host
stages the rest, pulling share j from host j over the fabric (then from any other peer, then the
NAS if peers fail), verifying what arrives exactly as it would a NAS copy.

Wave 2 is a tree per file, not one wave out of the seed: with the hosts rotated so the file's
seed is position 0, the host at position p asks its binomial-tree parent first (p with its highest
bit cleared), then the seed (which has had the file since wave 1), then everyone else. Each host
pulls its files lowest position first, so parents usually finish a file before their children ask
for it; a parent that has not got it yet costs one quick miss, a dead one a refused connection.
Hosts that finished a file serve it to the rest: the seed serves log2(n) children directly, not n-1.
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


def tree_position(host: int, seed: int, hosts: int) -> int:
    """Where `host` sits in the file's tree when the file's seed is position 0."""
    return (host - seed) % hosts


def tree_parent(host: int, seed: int, hosts: int) -> int:
    """The host's binomial-tree parent for a file seeded at `seed` (the seed's parent is itself)."""
    p = tree_position(host, seed, hosts)
    if p:
        p -= 1 << (p.bit_length() - 1)  # clear the highest bit
    return (seed + p) % hosts


def tree_sources(host: int, seed: int, hosts: int) -> list[int]:
    """Share indexes to ask for a file, in order: tree parent, the seed, then the rest of the ring.

    Pure and the same on every host, so the fleet forms one tree per file without talking. At
    most one miss per file (a parent still pulling): the seed has held the file since wave 1.
    """
    if hosts < 1 or not (0 <= host < hosts and 0 <= seed < hosts):
        raise ValueError(f"host {host} / seed {seed} out of range for {hosts} hosts")
    first = [tree_parent(host, seed, hosts), seed]
    ring = [(seed + q) % hosts for q in range(hosts)]
    order = list(dict.fromkeys(first + ring))
    return [i for i in order if i != host]


def tree_rounds(hosts: int) -> int:
    """Rounds a binomial tree needs to reach every host from one seed: ceil(log2(hosts))."""
    return max(hosts - 1, 0).bit_length()
