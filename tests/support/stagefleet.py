"""A staging fleet on netns hosts: the inventory for a lane over them, and the NAS byte counter.

Shared by tests/integration/test_fleet_stage.py and benchmarks/fanout_bench.py, so the benchmark
measures exactly the topology the tests prove correct.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from sparkfleet.demo.hubfixture import DRAFTER_REPO, WEIGHTS_REPO, HubFixture, build_nas_hub
from support.fleetnet import FleetNet, NetnsHost, shape_egress, sshfs_mount, unshape
from support.lanefleet import HostPool, lane_recipe, write_fleet


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


class StageNet:
    """A NAS and hosts dgx1..dgxN that outlive one test: the slow part of a staging fleet (namespaces,
    sshd, one sshfs mount of the NAS per host), built once per module instead of once per test.

    Each test still gets a fresh fleet: `fresh(names, shard_bytes)` builds a new NAS hub (new files,
    so no host's sshfs or page cache holds them yet) and hands the hosts back as new (HostPool:
    emptied trees, no shaping, no leftover process, a killed sshd brought back). `close()` tears
    everything down; the module fixture calls it even when a test failed.
    """

    def __init__(self, fleetnet: FleetNet, tmp: Path) -> None:
        self.tmp = tmp
        self._stack = contextlib.ExitStack()
        self.mounts: dict[str, Path] = {}
        self.net = fleetnet
        self.nas = fleetnet.add_host(f"nas-{secrets.token_hex(2)}")
        (self.nas.root / "share").mkdir()
        self.pool = HostPool(fleetnet, before_add=self._mount)
        self.hub: Path | None = None

    def _mount(self, name: str) -> None:
        # Mount first: `ip netns exec` gives each host's sshd a mount namespace copied at its start.
        # noforget: a file keeps its inode number for the mount's life, as on NFS (the fleet's NAS);
        # sshfs would otherwise number a file anew once the kernel forgot it, and a long-lived mount
        # under memory pressure then looks like a source rewritten under a running stage.
        if name not in self.mounts:
            mp = self.tmp / f"nas-{name}"
            opts = ("no_contain_symlinks", "noforget")
            self.mounts[name] = self._stack.enter_context(
                sshfs_mount(self.nas, self.nas.root / "share", mp, extra_opts=opts)
            )

    def fresh(self, names: Iterable[str], shard_bytes: int) -> tuple[dict[str, NetnsHost], HubFixture]:
        """Hosts `names` as new, and a new NAS hub (`self.hub`, under each host's mount)."""
        unshape(self.nas)
        if self.hub is not None:
            shutil.rmtree(self.hub, ignore_errors=True)
        self.hub = self.nas.root / "share" / f"hub-{secrets.token_hex(3)}"
        fixture = build_nas_hub(self.hub, shard_bytes=shard_bytes, absolute_links=False)
        return self.pool.fresh(names), fixture

    def nas_hub(self, name: str) -> Path:
        """The NAS hub as host `name` reads it: through its own sshfs mount."""
        assert self.hub is not None
        return self.mounts[name] / self.hub.name

    def close(self) -> None:
        with contextlib.suppress(Exception):
            unshape(self.nas)
        try:
            self.pool.close()
        finally:
            try:
                self._stack.close()  # the mounts, after the hosts whose sshd's namespaces copied them
            finally:
                self.net.remove_host(self.nas)
