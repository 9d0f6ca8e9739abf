"""Per-host placement facts: mounts, tmpfiles, the staging unit, lane units, deploy-rs node fields.

The NixOS modules and the deploy-rs profile take these facts from modules/lib/fleet.nix (builtins
only); this module derives the very same record from the same inventory so the CLI, `doctor` and
the tests see what Nix will build. tests/nix/test_fleet_lib.py evaluates both and compares them
field for field: one truth, two readers. A change here without the same change there fails CI.

Only placement lives here. A lane's env (TP_SIZE, DSV41_LAUNCHER, ...) is derived by the launch
code at serve time and is deliberately absent from both readers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from ..base.lock import LOCK_PATH as STAGE_LOCK
from .inventory import Host, Inventory, Lane

UNIT_PREFIX = "sparkfleet"
STAGING_UNIT = "sparkfleet-stage"
NFS_OPTIONS = (
    "nfsvers=4.2",
    "ro",
    "noatime",
    "noauto",
    "_netdev",
    "x-systemd.automount",
    "x-systemd.idle-timeout=600",
    "x-systemd.mount-timeout=30s",
)
LOCAL_OPTIONS = ("noatime", "nofail")
# Loading a lane image (tens of GB) during activation outlasts deploy-rs's default 240 s.
ACTIVATION_TIMEOUT_S = 1800
REMOTE_BUILD = True
CONFIRM_TIMEOUT_S = 60
# Starting a lane's ranks may pull its image first (tens of GB); readiness is not awaited.
LANE_START_TIMEOUT_S = 1800
PROFILE_ORDER = ("system", "sparkfleet")
SPARKFLEET_PROFILE_PATH = "/nix/var/nix/profiles/sparkfleet"


@dataclass(frozen=True)
class Mount:
    """A filesystem the host needs: the NAS hub cache over NFS, read-only."""

    where: str
    what: str | None
    fsType: str  # noqa: N815 - field names are the JSON both readers emit
    options: tuple[str, ...]
    readOnly: bool  # noqa: N815


@dataclass(frozen=True)
class TmpfilesRule:
    """A systemd-tmpfiles rule as its fields (type, path, mode, user, group, age), never a line to
    split: NixOS takes them as `systemd.tmpfiles.settings`. The path is one the schema's
    tmpfilesPath allows (no whitespace, %, backslash or quote), so no field can become another."""

    type: str
    path: str
    mode: str
    user: str
    group: str
    age: str


def owned_dir(path: str, user: str) -> TmpfilesRule:
    """A directory the user owns, its group the one of its name (DGX OS gives every user one)."""
    return TmpfilesRule("d", path, "0755", user, user, "-")


@dataclass(frozen=True)
class StagingUnit:
    """The oneshot that runs `sparkfleet stage <host>`; the CLI's lock file serialises it with manual runs."""

    unit: str
    argv: tuple[str, ...]
    lock: str
    user: str
    readWritePaths: tuple[str, ...]  # noqa: N815
    requiresMountsFor: tuple[str, ...]  # noqa: N815


@dataclass(frozen=True)
class LaneUnit:
    """The serving unit of a lane, on the lane's head (rank 0).

    `sparkfleet launch LANE --no-wait` starts every rank (workers first, head last; the launch
    code clears the receipt roots and writes the bind manifest on each node) and returns without
    waiting for the model to load, so a NixOS switch or a deploy-rs activation never blocks on a
    lane's boot; the unit stays active (oneshot + RemainAfterExit) and `sparkfleet stop LANE` is
    its ExecStop. Readiness is `sparkfleet status LANE`.
    """

    lane: str
    unit: str
    hosts: tuple[str, ...]  # rank order
    user: str
    startArgv: tuple[str, ...]  # noqa: N815
    stopArgv: tuple[str, ...]  # noqa: N815
    timeoutStartSec: float  # noqa: N815
    after: tuple[str, ...]
    conflicts: tuple[str, ...]
    # `[watchdog] scope = "lane"`: the kit's own controller watches its nodes and stops them all
    # when one stops (the EXL3 kit's portable_pair.py watch()), so the lane always runs with its
    # supervisor (`sparkfleet watch LANE`), which is what stops the other ranks here
    supervised: bool


@dataclass(frozen=True)
class ServiceUnit:
    """A fleet service this host runs (fleet.toml `services`): the gateway or the registry.

    Long-running (Type=simple, restarted on failure), started at boot. Its state (the gateway's
    keys and records; the registry's CA, certificate and config.yml) is in `stateDir`, systemd's
    StateDirectory (0700, owned by `user`): the operator's `keys add` and `registry init` on that
    host name the same directory (SPARKFLEET_GATEWAY_STATE / SPARKFLEET_STATE_DIR).
    """

    service: str  # "gateway" | "registry"
    unit: str
    user: str
    argv: tuple[str, ...]
    stateDir: str  # noqa: N815
    lanes: tuple[str, ...]  # the gateway's: lanes with a [gateway] table (what its spec root holds)


@dataclass(frozen=True)
class HostFacts:
    """Everything Nix places on one host, as both readers compute it."""

    host: str
    address: str
    sshUser: str  # noqa: N815
    sshPort: int  # noqa: N815
    localHub: str  # noqa: N815
    nasHub: str  # noqa: N815
    os: str
    mounts: tuple[Mount, ...]
    tmpfiles: tuple[TmpfilesRule, ...]
    staging: StagingUnit
    lanes: tuple[LaneUnit, ...] = field(default=())
    services: tuple[ServiceUnit, ...] = field(default=())


def parent_of(path: str) -> str:
    return str(PurePosixPath(path).parent)


def receipt_roots(lane: Lane) -> tuple[str, ...]:
    """The receipt roots the recipe declares ([launch].receipt_roots), cleared before every serve."""
    return lane.sections.launch.receipt_roots if lane.sections.launch is not None else ()


def lane_ranks(lane: Lane) -> dict[str, int]:
    """Node rank per host: [world].ranks when set, else the order of lane.hosts."""
    explicit = lane.sections.world.ranks
    return {host: int(explicit.get(host, i)) for i, host in enumerate(lane.hosts)}


def lane_head(lane: Lane) -> str:
    ranks = lane_ranks(lane)
    return next((h for h in lane.hosts if ranks[h] == 0), lane.hosts[0])


def _uniq(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def lane_unit_name(lane: str) -> str:
    return f"{UNIT_PREFIX}-lane-{lane}"


def lane_unit(inv: Inventory, host: Host, lane: Lane) -> LaneUnit:
    ranks = lane_ranks(lane)
    # Lanes headed on this host share it; their units never run together (one GPU per Spark).
    others = [
        lane_unit_name(o.name) + ".service"
        for o in inv.lanes_of(host.name)
        if o.name != lane.name and lane_head(o) == host.name
    ]
    return LaneUnit(
        lane=lane.name,
        unit=lane_unit_name(lane.name),
        hosts=tuple(sorted(lane.hosts, key=ranks.__getitem__)),
        user=host.ssh_user,
        startArgv=("sparkfleet", "launch", lane.name, "--no-wait"),
        stopArgv=("sparkfleet", "stop", lane.name),
        timeoutStartSec=LANE_START_TIMEOUT_S,
        after=(f"{STAGING_UNIT}.service", "network-online.target"),
        conflicts=tuple(others),
        supervised=lane_scoped_watchdog(lane),
    )


def lane_scoped_watchdog(lane: Lane) -> bool:
    """The recipe's `[watchdog] scope = "lane"`: one rank's stop stops the lane (default "rank")."""
    return lane.sections.watchdog.scope == "lane"


SERVICE_STATE = "/var/lib/sparkfleet"


def gateway_lanes(inv: Inventory) -> tuple[str, ...]:
    """The lanes that serve through the gateway (a [gateway] table in the recipe), sorted."""
    return tuple(n for n in sorted(inv.lanes) if inv.lanes[n].sections.gateway is not None)


def service_unit(inv: Inventory, host: Host, service: str) -> ServiceUnit:
    if service == "gateway":
        argv, state, lanes = ("sparkfleet", "gateway", "run"), f"{SERVICE_STATE}/gateway", gateway_lanes(inv)
    else:
        argv, state, lanes = ("sparkfleet", "registry", "serve"), SERVICE_STATE, ()
    return ServiceUnit(service, f"{UNIT_PREFIX}-{service}", host.ssh_user, argv, state, lanes)


def facts(inv: Inventory, name: str) -> HostFacts:
    """The placement record for host `name` (what modules/lib/fleet.nix `facts` returns)."""
    host = inv.host(name)
    local_hub, nas_hub = str(host.local_hub), str(host.nas_hub)
    lanes = inv.lanes_of(name)
    receipt_parents = _uniq([parent_of(r) for lane in lanes for r in receipt_roots(lane)])
    return HostFacts(
        host=name,
        address=host.address,
        sshUser=host.ssh_user,
        sshPort=host.ssh_port,
        localHub=local_hub,
        nasHub=nas_hub,
        os=host.os,
        mounts=(
            Mount(
                where=parent_of(nas_hub),
                what=host.nas_export,
                fsType="nfs",
                options=NFS_OPTIONS,
                readOnly=True,
            ),
        ),
        tmpfiles=tuple(owned_dir(p, host.ssh_user) for p in (local_hub, *receipt_parents)),
        staging=StagingUnit(
            unit=STAGING_UNIT,
            argv=("sparkfleet", "stage", name, "--here", "--json"),
            lock=str(PurePosixPath(local_hub, STAGE_LOCK)),
            user=host.ssh_user,
            readWritePaths=(local_hub,),
            requiresMountsFor=(local_hub, nas_hub),
        ),
        lanes=tuple(lane_unit(inv, host, lane) for lane in lanes if lane_head(lane) == name),
        services=tuple(service_unit(inv, host, s) for s in host.services),
    )


def deploy_node(inv: Inventory, name: str, profiles: dict[str, str | None]) -> dict[str, Any]:
    """deploy.nodes.<name> as deploy-rs reads it; `profiles` maps profile name -> activatable path.

    NixOS hosts take the `system` and `sparkfleet` profiles; DGX OS hosts (Nix on Ubuntu) only
    `sparkfleet`, whose activation installs the units itself.
    """
    host = inv.host(name)
    wanted = PROFILE_ORDER if host.os == "nixos" else ("sparkfleet",)
    present = [p for p in wanted if profiles.get(p) is not None]

    def profile(p: str) -> dict[str, Any]:
        out: dict[str, Any] = {"path": profiles[p], "user": "root"}
        if p == "sparkfleet":
            out["profilePath"] = SPARKFLEET_PROFILE_PATH
        return out

    return {
        "hostname": host.address,
        "sshUser": host.ssh_user,
        "user": "root",
        "sshOpts": ["-p", str(host.ssh_port), *(["-i", str(host.ssh_key)] if host.ssh_key else [])],
        "magicRollback": True,
        "autoRollback": True,
        "activationTimeout": ACTIVATION_TIMEOUT_S,
        "confirmTimeout": CONFIRM_TIMEOUT_S,
        # the node builds its own (aarch64) profiles: deploy works from an x86_64 operator machine
        "remoteBuild": REMOTE_BUILD,
        "profilesOrder": present,
        "profiles": {p: profile(p) for p in present},
    }
