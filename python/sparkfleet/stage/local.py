"""`sparkfleet stage` and `verify` on the host itself: what to stage, in which order, and the record.

The verb parses its options into a `Selection` and renders what comes back; everything between
(direct mode or the inventory, the reserve, the kit checkouts before the models, the peers of a
fan-out wave, the throughput bound of a plain run) is decided here. The inventory is read only
through `load`, and only when a HOST is named: direct mode reads none (start-up stays small).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.errors import SparkfleetError
from ..facts.hubcache import parse_repo_spec, repo_folder
from . import execute, remote
from .plan import StageRequest
from .targets import kits_for_host, requests_for_host
from .verify import verify_note

if TYPE_CHECKING:  # annotations only: direct mode reads no inventory
    from ..fleet.inventory import Inventory

Load = Callable[[], "Inventory"]


@dataclass(frozen=True)
class Selection:
    """What a stage or verify run is about: a HOST (+ --lane) from the inventory, or direct mode
    (--source, --dest, --repo), narrowed by --include/--exclude."""

    host: str | None
    lane: str | None
    source: Path | None
    dest: Path | None
    repos: tuple[str, ...]
    include: tuple[str, ...]
    exclude: tuple[str, ...]

    @property
    def direct(self) -> bool:
        return self.source is not None or self.dest is not None or bool(self.repos)

    def fleet_wide(self, here: bool) -> bool:
        """Whether the inventory decides where this runs (a HOST or a lane, not direct, not --here)."""
        return not self.direct and not here and bool(self.host or self.lane)


def known_names(inv: Inventory, lane: str | None, peer_spec: str | None = None) -> None:
    """Refuse a lane or peer the fleet does not have here, before any host is contacted (a host
    told to stage an unknown lane would only say so after the connection)."""
    if lane:
        inv.lane(lane)
    for name in (peer_spec or "").split(","):
        if name:
            inv.host(name)


def parse_ports(spec: str | None) -> list[int] | None:
    """--peer-ports PORT,PORT,...: the peers' rsyncd ports, in --peers order."""
    if not spec:
        return None
    try:
        ports = [int(p) for p in spec.split(",")]
    except ValueError:
        raise SparkfleetError(f"--peer-ports takes PORT,PORT,..., got {spec!r}") from None
    if not all(0 < p < 65536 for p in ports):
        raise SparkfleetError(f"--peer-ports {spec}: a port is 1..65535")
    return ports


def parse_share(spec: str | None) -> tuple[int, int] | None:
    """--share I/N: which share of a fan-out's first wave this host places."""
    if not spec:
        return None
    try:
        index, count = (int(x) for x in spec.split("/"))
    except ValueError:
        raise SparkfleetError(f"--share takes I/N, got {spec!r}") from None
    if not 0 <= index < count:
        raise SparkfleetError(f"--share {spec}: I must be in 0..N-1")
    return index, count


def build_requests(sel: Selection, load: Load) -> tuple[list[StageRequest], int]:
    """(requests, reserve bytes) from either the inventory or the direct-mode options."""
    if sel.direct:
        if sel.host or sel.lane:
            raise SparkfleetError("give either HOST [--lane] or --source/--dest/--repo, not both")
        if sel.source is None or sel.dest is None or not sel.repos:
            raise SparkfleetError("direct mode needs --source, --dest and at least one --repo")
        requests = []
        for spec in sel.repos:
            repo, rev = parse_repo_spec(spec)
            requests.append(StageRequest(sel.source, sel.dest, repo, rev, sel.include, sel.exclude))
        return requests, 0
    if not sel.host:
        raise SparkfleetError("name a HOST (from hosts/fleet.toml) or use --source/--dest/--repo")
    inv = load()
    requests = requests_for_host(inv, sel.host, sel.lane)
    if sel.include or sel.exclude:
        requests = [
            StageRequest(
                r.source_hub, r.dest_hub, r.repo, r.revision, r.include + sel.include, r.exclude + sel.exclude
            )
            for r in requests
        ]
    if not requests:
        raise SparkfleetError(f"host {sel.host} has no lane with models to stage")
    return requests, inv.host(sel.host).reserve_bytes


# (run record, source hubs, repo folders, state dir) -> the bound: roofline.stagebound's, handed
# down by the verb (roofline reads stage/, so stage/ does not import it back)
Bound = Callable[[dict, list[Path], list[str], "Path | None"], "dict | None"]


def with_io_bound(run: dict, requests: list[StageRequest], state_dir: Path | None, bound: Bound) -> dict:
    """The run summary plus its throughput as a % of this host's source-read / dest-write bound."""
    hubs = sorted({Path(r.source_hub) for r in requests})
    folders = sorted({repo_folder(r.repo) for r in requests})
    run["io_bound"] = bound(run, hubs, folders, state_dir)
    return run


@dataclass
class HereRun:
    """What one host stages here: the model requests, the space to leave, its kit checkouts."""

    requests: list[StageRequest]
    reserve: int
    kits: list
    state_dir: Path | None


def prepare(sel: Selection, load: Load, reserve_gib: float | None, with_kits: bool) -> HereRun:
    """The requests, the reserve (--reserve-gib over the host's) and, `with_kits`, the pinned kit
    checkouts ([[launch.trees]]) of the host's lanes, staged with the models on the host itself."""
    kits = kits_for_host(load(), sel.host, sel.lane) if with_kits else []
    requests, reserve = build_requests(sel, load)
    if reserve_gib is not None:
        from ..fleet.inventory import GIB  # lazy, as below: direct mode reads no inventory

        reserve = int(reserve_gib * GIB)
    state_dir = None
    if sel.host:
        from ..fleet.inventory import state_dir_of  # lazy: the inventory is for the fleet, not direct mode

        state_dir = state_dir_of(load().host(sel.host))
    return HereRun(requests, reserve, kits, state_dir)


def dry_run(here: HereRun) -> dict[str, Any]:
    """What the run would do: each repo's plan, the space check it makes first, each kit's plan."""
    plans = execute.plan(here.requests)
    space = execute.space_check(here.requests, plans, here.reserve)
    kits = []
    if here.kits:
        # lazy: its git runner (pins) reads the inventory, and direct mode (which has no kit) must not
        from .kits import plan_kits

        kits = [k.to_dict() for k in plan_kits(here.kits, here.state_dir)]
    return {"dry_run": True, "plans": [p.summary() for p in plans], "space": space, "kits": kits}


@dataclass(frozen=True)
class Wave:
    """How this run takes part in a fan-out: its share of wave 1, or the peers it pulls from in wave 2."""

    share: tuple[int, int] | None = None
    peers: tuple[str, ...] = ()
    transport: str = ""
    ports: list[int] | None = None
    secret: str | None = None
    ssh_config: Path | None = None


def stage_here(
    here: HereRun, sel: Selection, load: Load, wave: Wave, *, verify_mode: str, jobs: int,
    wait_seconds: float, progress: Any,
) -> tuple[execute.StageRun, list[dict]]:
    """Peers checked, kits first (small; a refused pin changes nothing), then the models."""
    peers = (
        remote.peer_sources(
            load(), list(wave.peers), sel.host, wave.ssh_config, wave.transport, wave.ports, wave.secret
        )
        if wave.peers
        else ()
    )
    done = []
    if here.kits:
        from .kits import stage_kits  # lazy, as in dry_run

        staged = stage_kits(here.kits, here.state_dir, sel.host, wait_seconds=wait_seconds, progress=progress)
        done = [k.to_dict() for k in staged]
    run = execute.stage(
        here.requests, verify_mode=verify_mode, jobs=jobs, reserve_bytes=here.reserve,
        wait_seconds=wait_seconds, share=wave.share, progress=progress, peers=peers,
    )  # fmt: skip
    return run, done


def record(
    here: HereRun, wave: Wave, run: execute.StageRun, kit_results: list[dict], bound: Bound
) -> dict[str, Any]:
    """The run's record. A fan-out wave's throughput is not the NAS-to-NVMe path's, and a probe
    would read the NAS once more on every host: the bound is for a plain stage only."""
    plain = wave.share is None and not wave.peers
    doc = with_io_bound(run.to_dict(), here.requests, here.state_dir, bound) if plain else run.to_dict()
    return doc | {"kits": kit_results}


@dataclass
class HereVerify:
    """`verify` of one host here: each repo's report, each kit checkout's verdict, the totals."""

    reports: list
    kits: list[dict]
    totals: dict[str, int]
    ok: bool
    note: str

    def to_dict(self, mode: str) -> dict[str, Any]:
        repos = [r.to_dict() for r in self.reports]
        return {"ok": self.ok, **self.totals, "mode": mode, "note": self.note, "repos": repos,
                "kits": self.kits}  # fmt: skip


def verify_here(sel: Selection, load: Load, verify_mode: str) -> HereVerify:
    """Check the local tree against the source (and, for a HOST, the kit checkouts its lanes bind)."""
    requests, _ = build_requests(sel, load)
    reports = execute.verify(requests, verify_mode)
    kits = []  # the kit checkouts the host's lanes bind ([[launch.trees]]): as stage brings them
    if sel.host and not sel.direct:
        from ..fleet.inventory import state_dir_of  # lazy, as in prepare: direct mode reads no inventory
        from .kits import verify_kits  # lazy, as in dry_run

        inv = load()
        needed = kits_for_host(inv, sel.host, sel.lane)
        verdicts = verify_kits(needed, state_dir_of(inv.host(sel.host)), sel.host, sel.lane)
        kits = [k.to_dict() for k in verdicts]
    totals = {
        k: sum(getattr(r, k) for r in reports) for k in ("links_ok", "dangling", "mismatches", "missing")
    }
    ok = all(r.ok for r in reports) and all(k["ok"] for k in kits)
    note = verify_note(verify_mode, [r.to_dict() for r in reports])
    return HereVerify(reports, kits, totals, ok, note)
