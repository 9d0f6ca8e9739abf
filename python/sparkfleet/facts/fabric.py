"""RoCE fabric facts of one node, read from a sysfs root.

Why per node: the peers' most reported multi-node launch failure is one global HCA/GID list
copied to every node. GID tables differ per node (the RoCE v2 IPv4 GID lands at whatever index
the driver gave it), so each rank's `NCCL_IB_HCA`, `NCCL_IB_GID_INDEX` and socket interface are
looked up on that node, against that node's fabric IP.

Layout read (all plain files, so tests use fake trees):
  <sysfs>/class/infiniband/<hca>/ports/<port>/state            "4: ACTIVE"
  <sysfs>/class/infiniband/<hca>/ports/<port>/link_layer       "Ethernet"
  <sysfs>/class/infiniband/<hca>/ports/<port>/gids/<i>         "0000:...:ffff:c0a8:5801"
  <sysfs>/class/infiniband/<hca>/ports/<port>/gid_attrs/types/<i>  "RoCE v2"
  <sysfs>/class/infiniband/<hca>/ports/<port>/gid_attrs/ndevs/<i>  "enp1s0f0np0"
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from ..base.errors import SparkfleetError

ROCE_V2 = "RoCE v2"


class FabricError(SparkfleetError):
    """The node's RoCE fabric cannot be matched to its fabric IP."""


# The RoCE env every node gets whatever it detects, and the keys only detection can fill in.
FIXED_ENV = {"NCCL_NET": "IB", "NCCL_IB_DISABLE": "0"}
NODE_ENV_KEYS = ("NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


@dataclass(frozen=True)
class RoceGid:
    """One populated GID table slot of an HCA port."""

    hca: str
    port: int
    index: int
    gid: str
    gid_type: str
    netdev: str | None
    ipv4: str | None  # the IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d)


@dataclass(frozen=True)
class HcaPort:
    """An RDMA device port with its state and GID table."""

    hca: str
    port: int
    state: str  # "ACTIVE", "DOWN", ...
    link_layer: str  # "Ethernet" for RoCE, "InfiniBand" otherwise
    gids: tuple[RoceGid, ...] = ()

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"

    @property
    def roce_v2_ipv4(self) -> tuple[RoceGid, ...]:
        return tuple(g for g in self.gids if g.gid_type == ROCE_V2 and g.ipv4)


@dataclass(frozen=True)
class FabricFacts:
    """What a node's launch env needs: HCAs to use, the GID index of its fabric IP, the netdev."""

    fabric_ip: str
    hcas: tuple[str, ...]
    gid_index: int
    netdev: str
    ports: tuple[HcaPort, ...] = field(default=(), repr=False)

    def env(self) -> dict[str, str]:
        """The per-node NCCL/Gloo env (transport tuning is the recipe's business, not detection's)."""
        return {
            **FIXED_ENV,
            "NCCL_IB_HCA": ",".join(self.hcas),
            "NCCL_IB_GID_INDEX": str(self.gid_index),
            "NCCL_SOCKET_IFNAME": self.netdev,
            "GLOO_SOCKET_IFNAME": self.netdev,
        }


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _ipv4_of_gid(gid: str) -> str | None:
    try:
        addr = ipaddress.IPv6Address(gid)
    except ValueError:
        return None
    return str(addr.ipv4_mapped) if addr.ipv4_mapped is not None else None


def _int_names(path: Path) -> list[int]:
    try:
        return sorted(int(p.name) for p in path.iterdir() if p.name.isdigit())
    except OSError:
        return []


def scan_ports(sysfs: Path = Path("/sys")) -> tuple[HcaPort, ...]:
    """Every port of every RDMA device under `sysfs`, with its populated (non-zero) GIDs."""
    ib = sysfs / "class" / "infiniband"
    if not ib.is_dir():
        return ()
    ports = []
    for hca_dir in sorted(ib.iterdir(), key=lambda p: p.name):
        for port in _int_names(hca_dir / "ports"):
            pdir = hca_dir / "ports" / str(port)
            state = (_read(pdir / "state") or "").split(":")[-1].strip()
            gids = []
            for idx in _int_names(pdir / "gids"):
                gid = _read(pdir / "gids" / str(idx))
                if not gid or ipaddress.IPv6Address(gid) == ipaddress.IPv6Address("::"):
                    continue
                gids.append(
                    RoceGid(
                        hca=hca_dir.name,
                        port=port,
                        index=idx,
                        gid=gid,
                        gid_type=_read(pdir / "gid_attrs" / "types" / str(idx)) or "",
                        netdev=_read(pdir / "gid_attrs" / "ndevs" / str(idx)) or None,
                        ipv4=_ipv4_of_gid(gid),
                    )
                )
            ports.append(
                HcaPort(
                    hca=hca_dir.name,
                    port=port,
                    state=state,
                    link_layer=_read(pdir / "link_layer") or "",
                    gids=tuple(gids),
                )
            )
    return tuple(ports)


def detect(ports: tuple[HcaPort, ...], fabric_ip: str | None) -> FabricFacts:
    """Pick this node's HCAs, GID index and netdev for `fabric_ip` (inferred when unambiguous).

    The GID index is the RoCE v2 slot whose IPv4-mapped GID is the fabric IP. NCCL takes one
    GID index per process, so the other rails join only if their slot at that same index is a
    RoCE v2 IPv4 GID too; DOWN ports never join (a DOWN `*s0f1` in the list hangs the rank).
    """
    roce = [p for p in ports if p.active and p.link_layer == "Ethernet"]
    if not ports:
        raise FabricError(
            "no RDMA devices under /sys/class/infiniband",
            hint='check the ConnectX driver (mlx5_core, ib_core) or set [launch] fabric = "none"',
        )
    candidates = [g for p in roce for g in p.roce_v2_ipv4]
    if fabric_ip is None:
        ips = sorted({g.ipv4 for g in candidates if g.ipv4})
        if len(ips) != 1:
            raise FabricError(
                f"cannot infer the fabric IP: active RoCE v2 IPv4 GIDs carry {', '.join(ips) or 'none'}",
                hint="set fabric_ip for this host in hosts/fleet.toml",
            )
        fabric_ip = ips[0]
    matches = [g for g in candidates if g.ipv4 == fabric_ip]
    if not matches:
        seen = ", ".join(f"{g.hca}/{g.port}[{g.index}]={g.ipv4}" for g in candidates) or "none"
        raise FabricError(
            f"no ACTIVE RoCE v2 GID carries the fabric IP {fabric_ip} (seen: {seen})",
            hint="check the address on the RoCE netdev (ip addr) and fabric_ip in hosts/fleet.toml",
        )
    primary = matches[0]
    if not primary.netdev:
        raise FabricError(
            f"{primary.hca}/{primary.port} GID {primary.index} names no netdev (gid_attrs/ndevs)",
            hint="the RoCE netdev must be up with the fabric IP assigned",
        )
    hcas = [primary.hca]
    for p in roce:
        if p.hca in hcas:
            continue
        slot = next((g for g in p.roce_v2_ipv4 if g.index == primary.index), None)
        if slot is not None:
            hcas.append(p.hca)
    return FabricFacts(
        fabric_ip=fabric_ip,
        hcas=tuple(hcas),
        gid_index=primary.index,
        netdev=primary.netdev or "",
        ports=ports,
    )
