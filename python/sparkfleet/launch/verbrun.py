"""What a launch-side verb runs on, resolved once from what the operator named: a lane, which copy
of it (`--replica N`), and maybe a cut release (`--release NAME`).

A release runs its own recipe and fleet file, written to a scratch folder that lasts while the verb
runs; its generation is still the lane's (its replica's), recorded beside the others under the
fleet root, so `history`, `promote` and `rollback` see it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..fleet.inventory import Inventory
from ..lane.manifest import candidate_sources
from ..lane.replicas import generations_root, replica_inventory
from ..lane.spec import redact_env
from .generations import rollback_inventory
from .lanerun import LaneRun, lane_run
from .plan import LanePlan, dry_run, planned_argv
from .revert import release_as_generation, release_inventory

SCRATCH_PREFIX = "sparkfleet-release-"


@contextmanager
def launch_run(
    inv: Inventory,
    lane: str,
    replica: int,
    release: str | None = None,
    on_event: Callable[[str], None] = lambda _msg: None,
) -> Iterator[LaneRun]:
    """Replica `replica` of LANE as `launch` starts it: the fleet's recipe, or release NAME's (its
    image pulled by digest on every host first); its generation recorded with the lane's."""
    with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX) as tmp:
        source = release_inventory(inv, lane, release, Path(tmp), on_event=on_event) if release else inv
        home = generations_root(inv.root, lane, replica)  # the fleet's, never the scratch folder's
        yield lane_run(replica_inventory(source, lane, replica), lane, home)


@dataclass(frozen=True)
class PreviewRank:
    """One rank of a dry run, as it would start (`start`: its place in the start order)."""

    start: int
    rank: int
    host: str
    runtime: str
    name: str
    image: str | None
    argv: list[str]
    env: dict[str, str]  # secrets redacted; a value only the node can tell is left out (see unknown)
    binds: list[str]
    devices: list[str]
    cache_seed: str | None
    unknown: dict[str, str]  # env key -> why only the node can tell it


def preview(
    inv: Inventory, lane: str, replica: int, release: str | None = None
) -> tuple[LanePlan, list[PreviewRank]]:
    """`launch --dry-run`: every rank as it would start, workers first, head last, touching no host
    (with a release: as its own recipe and fleet file would start them, unverified: nothing is
    contacted)."""
    with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX) as tmp:
        if release:
            inv = rollback_inventory(release_as_generation(inv, lane, release, verify=False)[0], Path(tmp))
        plan = dry_run(replica_inventory(inv, lane, replica), lane)
    ranks = []
    for n, spec in enumerate(plan.start_order(), 1):
        unknown = plan.unknown.get(spec.host, {})
        ranks.append(
            PreviewRank(
                start=n,
                rank=spec.rank,
                host=spec.host,
                runtime=spec.runtime,
                name=spec.name,
                image=spec.image,
                argv=planned_argv(spec),
                env={k: v for k, v in redact_env(spec.env).items() if k not in unknown},
                binds=[b.docker_arg() for b in spec.binds],
                devices=list(spec.devices),
                cache_seed=spec.cache_seed.describe() if spec.cache_seed else None,
                unknown=unknown,
            )
        )
    return plan, ranks


@dataclass(frozen=True)
class BindCandidate:
    """Where one of the lane's models would bind from on a host whose staged state is not known."""

    repo: str
    revision: str
    local: str
    nas: str
    include: list[str]
    exclude: list[str]


def bind_candidates(inv: Inventory, lane: str, host: str) -> list[BindCandidate]:
    """Each model's two candidate sources on `host` (its local hub when staged and verified there,
    else the NAS read-only): what `manifest` shows when the node's state is unknown."""
    h = inv.host(host)
    out = []
    for model in inv.lane(lane).models:
        local, nas = candidate_sources(model.repo, model.revision, h.local_hub, h.nas_hub)
        out.append(
            BindCandidate(model.repo, model.revision, local, nas, list(model.include), list(model.exclude))
        )
    return out
