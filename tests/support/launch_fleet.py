"""Launch tests' host fields and fake sysfs RoCE trees (the fleet root itself: support.lanefleet)."""

from __future__ import annotations

import ipaddress
from pathlib import Path


def host_fields(name: str, base: Path, **extra) -> dict:
    d = {
        "address": name,
        "ssh_user": "kilork",
        "local_hub": str(base / name / "nvme" / "hub"),
        "nas_hub": str(base / "nas" / "hub"),
        "state_dir": str(base / name / "state"),
    }
    d.update(extra)
    return d


def fake_roce_sysfs(
    root: Path,
    hcas: dict[str, dict],
) -> Path:
    """A sysfs tree: hcas = {name: {"state": "ACTIVE", "gids": {index: (ipv4 or gid, type, netdev)}}}."""
    for hca, spec in hcas.items():
        port = root / "class" / "infiniband" / hca / "ports" / "1"
        (port / "gids").mkdir(parents=True)
        (port / "gid_attrs" / "types").mkdir(parents=True)
        (port / "gid_attrs" / "ndevs").mkdir(parents=True)
        state = spec.get("state", "ACTIVE")
        (port / "state").write_text({"ACTIVE": "4: ACTIVE", "DOWN": "1: DOWN"}[state] + "\n")
        (port / "link_layer").write_text(spec.get("link_layer", "Ethernet") + "\n")
        for idx in range(8):  # the kernel exposes a fixed table; unused slots read as all zeros
            gid, gtype, ndev = spec.get("gids", {}).get(idx, ("::", "", ""))
            if "." in gid:
                gid = str(ipaddress.IPv6Address(f"::ffff:{gid}").exploded)
            else:
                gid = ipaddress.IPv6Address(gid).exploded
            (port / "gids" / str(idx)).write_text(gid + "\n")
            if gtype:
                (port / "gid_attrs" / "types" / str(idx)).write_text(gtype + "\n")
                (port / "gid_attrs" / "ndevs" / str(idx)).write_text(ndev + "\n")
    return root
