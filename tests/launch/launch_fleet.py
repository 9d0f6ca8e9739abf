"""Test fleets for launch tests: a fleet root (fleet.toml + recipes) and fake sysfs RoCE trees."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

from sparkfleet.demo.hubfixture import DRAFTER_REPO, WEIGHTS_REPO


def _toml_value(v) -> str:
    if isinstance(v, dict):  # an inline table
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    return json.dumps(str(v)) if not isinstance(v, int | float | bool) else str(v).lower()


def write_fleet(root: Path, hosts: dict[str, dict], lanes: dict[str, str], pins: str = "") -> Path:
    """Write `root/hosts/fleet.toml` and `root/recipes/<lane>/recipe.toml`; return root."""
    lines = ["schema_version = 1", ""]
    for name, fields in hosts.items():
        lines.append(f"[hosts.{name}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in fields.items()]
        lines.append("")
    lines.append(PINS + pins)
    (root / "hosts").mkdir(parents=True, exist_ok=True)
    (root / "hosts" / "fleet.toml").write_text("\n".join(lines))
    for lane, text in lanes.items():
        (root / "recipes" / lane).mkdir(parents=True, exist_ok=True)
        (root / "recipes" / lane / "recipe.toml").write_text(text)
    return root


PINS = f"""
[pins.weights]
kind = "hf"
repo = "{WEIGHTS_REPO}"
revision = "main"

[pins.drafter]
kind = "hf"
repo = "{DRAFTER_REPO}"
revision = "main"

[pins.lane-image]
kind = "oci"
image = "ghcr.io/example/lane"
digest = "sha256:{"ab" * 32}"

[pins.short-image]
kind = "oci"
image = "ghcr.io/example/short"
digest = "sha256:3dbc3130"
"""

MODELS = """
[[models]]
pin = "weights"
exclude = ["page15/*"]

[[models]]
pin = "drafter"
"""


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
