"""A staging fleet on netns hosts: the inventory for a lane over them, and the NAS byte counter.

Shared by tests/integration/test_fleet_stage.py and benchmarks/fanout_bench.py, so the benchmark
measures exactly the topology the tests prove correct.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from sparkfleet.demo.hubfixture import DRAFTER_REPO, WEIGHTS_REPO
from support.fleetnet import NetnsHost, shape_egress
from support.lanefleet import lane_recipe, write_fleet


def nas_tx_bytes(netns: str) -> int:
    """Bytes the NAS namespace has sent on its interfaces (lo excluded)."""
    out = subprocess.run(["ip", "-n", netns, "-s", "-j", "link", "show"], capture_output=True, text=True)
    return sum(link["stats64"]["tx"]["bytes"] for link in json.loads(out.stdout) if link["ifname"] != "lo")


STAGE_PINS = {
    "w": {"kind": "hf", "repo": WEIGHTS_REPO, "revision": "main"},
    "d": {"kind": "hf", "repo": DRAFTER_REPO, "revision": "main"},
}
STAGE_MODELS = '[[models]]\npin = "w"\nexclude = ["page15/*"]\n[[models]]\npin = "d"\n'


def write_lane_fleet(
    root: Path,
    local_hubs: Mapping[str, Path],
    nas_hubs: Mapping[str, Path],
    lane: str,
    fabric_ips: Mapping[str, str] | None = None,
) -> Path:
    """hosts/fleet.toml + recipes/<lane>/recipe.toml: the fixture's weights (page15 excluded) + drafter.

    Host addresses are the host names; the tests' ssh_config maps them to namespace addresses.
    `fabric_ips`: each host's fabric address (its namespace address), for the rsyncd peer transport.
    """
    fabric = fabric_ips or {}
    hosts = {
        h: {"address": h, "local_hub": local_hubs[h], "nas_hub": nas_hubs[h]}
        | ({"fabric_ip": fabric[h]} if h in fabric else {})
        for h in local_hubs
    }
    return write_fleet(
        root,
        hosts,
        {lane: lane_recipe(hosts, STAGE_MODELS)},
        defaults={"ssh_user": "root", "reserve_gib": 0},
        pins=STAGE_PINS,
    )


def shape_fleet(nas: NetnsHost, hosts: Iterable[NetnsHost], nas_bit: int, fabric_ratio: float) -> dict:
    """Links like the fleet's: the NAS's one shared link at `nas_bit`, each host's at `fabric_ratio`x
    that (0: host links left unshaped). Returns the record the benchmark prints."""
    record = {"nas_bit": nas_bit, "nas_qdisc": shape_egress(nas, nas_bit), "fabric_ratio": fabric_ratio}
    if fabric_ratio > 0:
        host_bit = int(nas_bit * fabric_ratio)
        for h in hosts:
            shape_egress(h, host_bit)
        record["host_bit"] = host_bit
    return record


def count_temps(hubs: Iterable[Path]) -> int:
    """Temps being filled right now under the hubs (a pull or copy in flight)."""
    return sum(1 for hub in hubs if hub.exists() for p in hub.rglob(".*.sf-tmp-*"))
