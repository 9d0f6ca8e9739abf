"""Lane generations: what each launch ran, which one was good, and how to get back to it.

Why: when an update breaks a lane, the way back is usually the last version that worked, and
nobody wrote down what that was (eugr/spark-vllm-docker #306, #309). So every launch writes a
generation under recipes/<lane>/generations/<UTC>.json: image (pin + digest + per-host image ID),
every pin in force, the recipe's text and sha256, the fleet file's text, host fingerprints, the
gates' results and the boot (warm/cold cache, time to ready). `promote` marks the running one good
once smoke and the bench gate pass; `rollback` relaunches the last good one from its own recipe and
pins; `history` lists them with the reports measured while each was current.

Written temp + fsync + os.replace (sparkfleet.base.atomic): a generation is whole or absent.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.atomic import ensure_dir, sweep_temps, write_bytes
from ..base.errors import ExitCode, SparkfleetError
from ..base.jsonable import to_jsonable
from ..base.lock import held
from ..fleet.inventory import FLEET_FILE, LANE_NAME, RECIPE_FILE, RECIPES_DIR
from .generation_check import GENERATION_ID, problem

if TYPE_CHECKING:
    from ..fleet.inventory import Inventory, Lane
    from .lanerun import LaneRun
    from .plan import LanePlan
    from .report import LaunchReport

GENERATIONS = "generations"


class GenerationError(SparkfleetError):
    """No generation to promote or roll back to, or a gate said no."""

    exit_code = ExitCode.REFUSED


def generations_dir(root: Path, lane: str) -> Path:
    return root / RECIPES_DIR / lane / GENERATIONS


def utc_id(t: float | None = None) -> str:
    t = time.time() if t is None else t
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(t)) + f"{int((t % 1) * 1000):03d}Z"


LOCK_NAME = ".lock"


def _lane_dir(root: Path, lane: str) -> Path:
    """generations_dir, for a lane name that cannot climb out of recipes/ (`../../x` never can)."""
    if not LANE_NAME.fullmatch(lane):
        raise GenerationError(f"not a lane name: {lane[:80]!r}", hint="lane names are [a-z0-9][a-z0-9._-]*")
    return generations_dir(root, lane)


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A file under generations/ that is not a valid generation: named, never acted on."""

    path: Path
    why: str

    def __str__(self) -> str:
        return f"{self.path}: {self.why}"


def scan(root: Path, lane: str) -> tuple[list[dict], list[Skipped]]:
    """The valid generations of `lane` (oldest first) and the files that are not valid ones."""
    d = _lane_dir(root, lane)
    good: list[dict] = []
    skipped: list[Skipped] = []
    for p in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            gen = json.loads(p.read_bytes())
        except (OSError, ValueError, RecursionError) as exc:
            reason = "nested too deeply" if isinstance(exc, RecursionError) else f"unreadable ({exc})"
            skipped.append(Skipped(p, reason[:200]))
            continue
        why = problem(gen, lane, p.stem)
        if why:
            skipped.append(Skipped(p, why))
        else:
            good.append(gen)
    return good, skipped


def load_all(root: Path, lane: str) -> list[dict]:
    """Every valid generation of `lane`, oldest first (invalid files are skipped: see `scan`)."""
    return scan(root, lane)[0]


def load_strict(root: Path, lane: str) -> list[dict]:
    """Every generation of `lane`; a file that is not a valid generation refuses, naming it.

    Why refuse rather than skip for promote and rollback: they act on what they read, and a
    tampered or truncated record there is a question for a human before a lane is stopped.
    """
    gens, skipped = scan(root, lane)
    if skipped:
        raise GenerationError(
            f"lane {lane}: not a valid generation: " + "; ".join(map(str, skipped[:5])),
            hint="sparkfleet writes these files itself: inspect them, move the bad one out of "
            f"{generations_dir(root, lane)}, then retry",
        )
    return gens


@contextmanager
def locked(root: Path, lane: str) -> Iterator[None]:
    """Hold the lane's generations lock (flock: the kernel drops it when the holder dies).

    Every writer of a generation holds it, so temps left by a `kill -9` can be swept here without
    touching another writer's temp in flight.
    """
    d = _lane_dir(root, lane)
    with held(d / LOCK_NAME):
        sweep_temps(d)
        yield


def save(root: Path, gen: dict) -> Path:
    """Write a generation (its lane and id must be a lane name and a UTC id: they name the path)."""
    lane, gid = gen.get("lane"), gen.get("id")
    if not isinstance(lane, str) or not LANE_NAME.fullmatch(lane):
        raise GenerationError(f"refusing to save a generation whose lane is {str(lane)[:80]!r}")
    if not isinstance(gid, str) or not GENERATION_ID.fullmatch(gid):
        raise GenerationError(f"refusing to save a generation whose id is {str(gid)[:80]!r}")
    path = generations_dir(root, lane) / f"{gid}.json"
    ensure_dir(path.parent)
    write_bytes(path, json.dumps(gen, indent=1, sort_keys=True).encode())
    return path


def boot_record(
    cache_key: str, caches: dict[str, dict], ready_s: float | None, weight_s: float | None,
    history: list[dict], regression_pct: float,
) -> dict[str, Any]:  # fmt: skip
    """Warm/cold boot of a launch and a regression flag against the last boot of the same kind
    (same cache key, same warm/cold): a warm boot is only compared with warm boots."""
    warm = bool(caches) and all(c.get("warm") for c in caches.values())
    boot: dict[str, Any] = {
        "cache_key": cache_key,
        # no boot cache reported (a --no-wait boot still reports one): neither warm nor cold
        "cache": ("warm" if warm else "cold") if caches else "none",
        "per_host": caches,
        "time_to_ready_s": ready_s,
        "weight_load_s": weight_s,
        "regression": None,
    }
    same = [
        g["boot"]
        for g in history
        if g.get("boot", {}).get("cache_key") == cache_key
        and g["boot"].get("cache") == boot["cache"]
        and g["boot"].get("time_to_ready_s")
    ]
    if ready_s is not None and same:
        prev = same[-1]["time_to_ready_s"]
        change = (ready_s - prev) / prev * 100
        boot["previous_s"] = prev
        if change > regression_pct:
            boot["regression"] = (
                f"{boot['cache']} boot took {ready_s:.1f} s, {change:+.0f}% against the last {boot['cache']} "
                f"boot ({prev:.1f} s; limit +{regression_pct:g}%)"
            )
    return boot


def _boot(plan: LanePlan, report: LaunchReport, history: list[dict]) -> dict[str, Any]:
    ready = report.ready
    ok = ready is not None and ready.ok
    return boot_record(
        plan.by_rank()[0].boot_cache_key,
        report.boot_cache,
        ready.time_to_ready_s if ok else None,
        ready.weight_load_s if ok else None,
        history,
        plan.recipe.boot_cache.regression_pct,
    )


def record_launch(run: LaneRun, plan: LanePlan, report: LaunchReport) -> dict:
    """Write this launch's generation in the lane's home (a replica's own) and return it."""
    inv, lane, root = run.inv, run.lane, run.home
    recipe_text = lane.recipe_path.read_text()
    fleet_text = (inv.root / FLEET_FILE).read_text()
    history = load_all(root, plan.lane)
    pins = {
        name: {"kind": p.kind, "source": p.source, "value": p.value, "resolved": p.resolved}
        for name, p in sorted(inv.pins.items())
        if name in _pins_of(lane)
    }
    image = plan.recipe.image
    pre = report.preflight
    fps = pre.fingerprints if pre else {}
    gen = {
        "id": utc_id(),
        "lane": plan.lane,
        "created_at": time.time(),
        "status": "ready"
        if report.ready and report.ready.ok
        else ("started" if report.ready is None else "failed"),
        "good": False,
        "image": {"pin": image.name, "ref": image.ref} if image else None,
        "image_ids": {h: fp.get("image_id") for h, fp in fps.items()},
        "pins": pins,
        "recipe_sha256": hashlib.sha256(recipe_text.encode()).hexdigest(),
        "recipe_text": recipe_text,
        "fleet_text": fleet_text,
        "hosts": [s.host for s in plan.by_rank()],
        "fingerprints": fps,
        "drift": pre.drift if pre else [],
        "canary": to_jsonable(pre.canary) if pre and pre.canary else None,
        "memory": pre.memory if pre else {},
        "boot": _boot(plan, report, history),
        "nas_weights": report.nas_weights,  # non-optional weights served from the NAS (allowed)
        "cache_seed": report.cache_seed,  # host -> the kit's kernel cache each /cache got first
        "rolled_back_to": None,  # a rollback's relaunch: the good generation it brought back
        "rolled_back_from": None,  # ... and the generation that was current when it did
        "stopped_at": None,  # `stop` ended it (status keeps how the launch went)
    }
    if gen["canary"]:
        for r in gen["canary"].get("ranks", []):
            r.pop("peers", None)
    with locked(root, plan.lane):
        save(root, gen)
    return gen


def _pins_of(lane: Lane) -> set[str]:
    """The pins the lane's recipe names: its models, its launch image and model, its engram tables."""
    names: set[str | None] = {m.pin for m in lane.models}
    sections = lane.sections
    if sections.launch is not None:
        names |= {sections.launch.image, sections.launch.model}
    if sections.engram is not None:
        names.add(sections.engram.pin)
    return {n for n in names if n}


def current(root: Path, lane: str, strict: bool = False) -> dict | None:
    """The newest generation that came up (the one a running lane serves); `strict`: see load_strict."""
    gens = [g for g in (load_strict if strict else load_all)(root, lane) if g["status"] == "ready"]
    return gens[-1] if gens else None


def find_generation(root: Path, lane: str, gid: str) -> dict | None:
    """The valid generation `gid` of `lane`, or None (a release names the generation it froze)."""
    return next((g for g in load_all(root, lane) if g["id"] == gid), None)


def last_good(root: Path, lane: str, strict: bool = False) -> dict | None:
    gens = [g for g in (load_strict if strict else load_all)(root, lane) if g.get("good")]
    return gens[-1] if gens else None


@dataclasses.dataclass
class Promotion:
    generation: str
    promoted: bool
    smoke_ok: bool
    smoke: list[dict]
    bench_report: str | None
    gate: str
    regressions: list[str]
    good: bool = False  # the record on disk after this attempt (another promote may have passed)


def promote(
    root: Path,
    lane: str,
    running: bool,
    smoke: Callable[[], tuple[bool, list[dict]]],
    bench_gate: Callable[[float], tuple[str | None, bool, str, list[str]]],
) -> Promotion:
    """Mark the running generation good iff smoke passes and the bench report passes the baseline gate.

    `smoke()` → (ok, cases); `bench_gate(since)` → (report path, passed, what was compared, regressions)
    for the newest bench report made since the generation came up.
    """
    gen = current(root, lane, strict=True)
    if gen is None or not running:
        raise GenerationError(
            f"lane {lane} has no running generation to promote",
            hint=f"sparkfleet launch {lane}, then sparkfleet bench {lane}",
        )
    smoke_ok, cases = smoke()
    report, passed, gate, regressions = bench_gate(gen["created_at"]) if smoke_ok else (None, False, "", [])
    ok = smoke_ok and passed
    attempt = {"at": time.time(), "smoke_ok": smoke_ok, "smoke": cases, "bench_report": report,
               "gate": gate, "regressions": regressions, "promoted": ok}  # fmt: skip
    with locked(root, lane):  # smoke and bench took minutes: merge into the record as it is now
        fresh = next((g for g in load_strict(root, lane) if g["id"] == gen["id"]), None)
        if fresh is None:
            raise GenerationError(f"lane {lane}: generation {gen['id']} vanished while it was being promoted")
        was_good = bool(fresh.get("good"))
        if ok or not was_good:  # a failed attempt never hides the promotion that made it good
            fresh["promotion"] = attempt
        fresh["good"] = was_good or ok
        save(root, fresh)
    return Promotion(gen["id"], ok, smoke_ok, cases, report, gate, regressions, fresh["good"])


def rollback_inventory(gen: dict, workdir: Path) -> Inventory:
    """An inventory that is the generation's own fleet file and recipe (validated like any other)."""
    from ..fleet.inventory import load

    if not LANE_NAME.fullmatch(gen["lane"]):  # it names a folder: never one outside workdir
        raise GenerationError(f"generation {gen['id']}: not a lane name: {gen['lane'][:80]!r}")
    ensure_dir((workdir / FLEET_FILE).parent)
    write_bytes(workdir / FLEET_FILE, gen["fleet_text"].encode())
    write_bytes(workdir / RECIPES_DIR / gen["lane"] / RECIPE_FILE, gen["recipe_text"].encode())
    return load(workdir)


def rollback(
    root: Path,
    lane: str,
    stop: Callable[[], Any],
    launch: Callable[[Inventory], LaunchReport],
    plan: Callable[[Inventory], Any] = lambda _inv: None,
    target: dict | None = None,
) -> tuple[dict, LaunchReport]:
    """Relaunch the lane's last good generation (same recipe, pins, image) on every host.

    `target`: that generation instead (`rollback --to NAME`: a release's frozen generation).
    Validate and plan first, stop second: the record (every generation of the lane, strictly), its
    fleet file and recipe (a full inventory load) and `plan(inventory)` (every check launch runs
    before touching a host) must all pass while the running lane is still serving.
    """
    good = target or last_good(root, lane, strict=True)
    if good is None:
        raise GenerationError(
            f"lane {lane} has no good generation to roll back to",
            hint=f"promote a generation first: sparkfleet promote {lane}",
        )
    before = load_all(root, lane)
    with tempfile.TemporaryDirectory(prefix="sparkfleet-rollback-") as tmp:
        inv = rollback_inventory(good, Path(tmp))
        plan(inv)
        stop()
        report = launch(inv)
    if report.generation is not None:
        with locked(root, lane):
            fresh = next((g for g in load_all(root, lane) if g["id"] == report.generation["id"]), None)
            gen = fresh or report.generation
            gen["rolled_back_to"] = good["id"]
            gen["rolled_back_from"] = before[-1]["id"] if before else None
            if (
                report.ready is not None
                and report.ready.ok
                and good.get("recipe_sha256") == gen.get("recipe_sha256")
            ):
                gen["good"] = True  # the very generation that was proven good, proven up again
                gen["promotion"] = {"at": time.time(), "inherited_from": good["id"]}
            save(root, gen)
            report.generation = gen
    return good, report


def mark_stopped(root: Path, lane: str, at: float | None = None) -> dict | None:
    """`stop` ended the lane: its newest generation that was not stopped yet says so (history then
    reads `stopped`, not the `ready` it reached). A read-only fleet root (nix run) is left alone."""
    try:
        with locked(root, lane):
            gens = load_all(root, lane)
            if not gens or gens[-1].get("stopped_at"):
                return None
            gen = gens[-1]
            gen["stopped_at"] = time.time() if at is None else at
            save(root, gen)
    except (OSError, SparkfleetError):  # a read-only root, or a lock that is not ours: leave it
        return None
    return gen


def shown_status(g: dict) -> str:
    """How a generation reads in history: stopped once `stop` ended it, else how its launch went."""
    if g.get("stopped_at"):
        return f"stopped (was {g['status']})" if g["status"] != "ready" else "stopped"
    return g["status"]


def history(root: Path, lane: str, reports: list[Any]) -> list[dict]:
    """Generations newest first, each with the reports made while it was the newest generation."""
    gens = load_all(root, lane)  # a file that is not a valid generation is skipped (scan names it)
    out = []
    for i, g in enumerate(gens):
        end = gens[i + 1]["created_at"] if i + 1 < len(gens) else float("inf")
        mine = [r for r in reports if g["created_at"] <= r[0] < end]
        out.append({
            "id": g["id"], "status": shown_status(g), "good": g.get("good", False),
            "image": (g.get("image") or {}).get("ref"), "recipe_sha256": g["recipe_sha256"][:12],
            "boot": {"cache": g.get("boot", {}).get("cache", "none"),  # a record without a boot: none
                     **{k: g.get("boot", {}).get(k) for k in ("time_to_ready_s", "regression")}},
            "drift": g.get("drift", []), "rolled_back_from": g.get("rolled_back_from"),
            "rolled_back_to": g.get("rolled_back_to"),
            "promotion": {k: v for k, v in (g.get("promotion") or {}).items() if k != "smoke"},
            "reports": [r[1] for r in mine],
        })  # fmt: skip
    return list(reversed(out))
