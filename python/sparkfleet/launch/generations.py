"""Lane generations: what each launch ran, which one was good, and how to get back to it.

Why: when an update breaks a lane, the way back is usually the last version that worked, and
nobody wrote down what that was (eugr/spark-vllm-docker #306, #309). So every launch writes a
generation under recipes/<lane>/generations/<UTC>.json: image (pin + digest + per-host image ID),
every pin in force, the recipe's text and sha256, the fleet file's text, host fingerprints, the
gates' results and the boot (warm/cold cache, time to ready). `promote` marks the running one good
once smoke and the bench gate pass; `rollback` relaunches the last good one from its own recipe and
pins; `history` lists them with the reports measured while each was current.

Written temp + fsync + os.replace (sparkfleet.atomic): a generation is whole or absent.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..atomic import write_bytes
from ..errors import ExitCode, SparkfleetError
from ..inventory import FLEET_FILE, RECIPE_FILE, RECIPES_DIR
from ..jsonable import to_jsonable

if TYPE_CHECKING:
    from ..inventory import Inventory
    from .lane import LanePlan, LaunchReport

GENERATIONS = "generations"


class GenerationError(SparkfleetError):
    """No generation to promote or roll back to, or a gate said no."""

    exit_code = ExitCode.REFUSED


def generations_dir(root: Path, lane: str) -> Path:
    return root / RECIPES_DIR / lane / GENERATIONS


def utc_id(t: float | None = None) -> str:
    t = time.time() if t is None else t
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(t)) + f"{int((t % 1) * 1000):03d}Z"


def load_all(root: Path, lane: str) -> list[dict]:
    """Every generation of `lane`, oldest first."""
    d = generations_dir(root, lane)
    out = []
    for p in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            out.append(json.loads(p.read_text()))
        except (OSError, ValueError):
            continue
    return out


def save(root: Path, gen: dict) -> Path:
    path = generations_dir(root, gen["lane"]) / f"{gen['id']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
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
        "cache": "warm" if warm else "cold",
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


def record_launch(inv: Inventory, plan: LanePlan, report: LaunchReport, root: Path) -> dict:
    """Write this launch's generation and return it."""
    lane = inv.lane(plan.lane)
    recipe_text = lane.recipe_path.read_text()
    fleet_text = (inv.root / FLEET_FILE).read_text()
    history = load_all(root, plan.lane)
    pins = {
        name: {"kind": p.kind, "source": p.source, "value": p.value, "resolved": p.resolved}
        for name, p in sorted(inv.pins.items())
        if name in _pins_of(lane.raw)
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
        "image": {"pin": image.name, "ref": f"{image.source}@{image.value}"} if image else None,
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
        "rolled_back_from": None,
    }
    if gen["canary"]:
        for r in gen["canary"].get("ranks", []):
            r.pop("peers", None)
    save(root, gen)
    return gen


def _pins_of(raw: dict) -> set[str]:
    names = {m.get("pin") for m in raw.get("models", []) if isinstance(m, dict)}
    launch = raw.get("launch", {})
    names |= {launch.get("image"), launch.get("model")}
    if isinstance(raw.get("engram"), dict):
        names.add(raw["engram"].get("pin"))
    return {n for n in names if n}


def current(root: Path, lane: str) -> dict | None:
    """The newest generation that came up (the one a running lane serves)."""
    gens = [g for g in load_all(root, lane) if g["status"] == "ready"]
    return gens[-1] if gens else None


def last_good(root: Path, lane: str) -> dict | None:
    gens = [g for g in load_all(root, lane) if g.get("good")]
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
    gen = current(root, lane)
    if gen is None or not running:
        raise GenerationError(
            f"lane {lane} has no running generation to promote",
            hint=f"sparkfleet launch {lane}, then sparkfleet bench {lane}",
        )
    smoke_ok, cases = smoke()
    report, passed, gate, regressions = bench_gate(gen["created_at"]) if smoke_ok else (None, False, "", [])
    ok = smoke_ok and passed
    gen["promotion"] = {"at": time.time(), "smoke_ok": smoke_ok, "smoke": cases, "bench_report": report,
                        "gate": gate, "regressions": regressions, "promoted": ok}  # fmt: skip
    if ok:
        gen["good"] = True
    save(root, gen)
    return Promotion(gen["id"], ok, smoke_ok, cases, report, gate, regressions)


def rollback_inventory(gen: dict, workdir: Path) -> Inventory:
    """An inventory that is the generation's own fleet file and recipe (validated like any other)."""
    from ..inventory import load

    (workdir / FLEET_FILE).parent.mkdir(parents=True, exist_ok=True)
    (workdir / FLEET_FILE).write_text(gen["fleet_text"])
    rdir = workdir / RECIPES_DIR / gen["lane"]
    rdir.mkdir(parents=True, exist_ok=True)
    (rdir / RECIPE_FILE).write_text(gen["recipe_text"])
    return load(workdir)


def rollback(
    root: Path,
    lane: str,
    stop: Callable[[], Any],
    launch: Callable[[Inventory], LaunchReport],
    target: dict | None = None,
) -> tuple[dict, LaunchReport]:
    """Stop the lane and relaunch its last good generation (same recipe, pins, image) on every host.

    `target`: that generation instead (`rollback --to NAME`: a release's frozen generation)."""
    good = target or last_good(root, lane)
    if good is None:
        raise GenerationError(
            f"lane {lane} has no good generation to roll back to",
            hint=f"promote a generation first: sparkfleet promote {lane}",
        )
    stop()
    with tempfile.TemporaryDirectory(prefix="sparkfleet-rollback-") as tmp:
        inv = rollback_inventory(good, Path(tmp))
        report = launch(inv)
    if report.generation is not None:
        report.generation["rolled_back_from"] = good["id"]
        if (
            report.ready is not None
            and report.ready.ok
            and good.get("recipe_sha256") == report.generation.get("recipe_sha256")
        ):
            report.generation["good"] = True  # the very generation that was proven good, proven up again
            report.generation["promotion"] = {"at": time.time(), "inherited_from": good["id"]}
        save(root, report.generation)
    return good, report


def history(root: Path, lane: str, reports: list[Any]) -> list[dict]:
    """Generations newest first, each with the reports made while it was the newest generation."""
    gens = load_all(root, lane)
    out = []
    for i, g in enumerate(gens):
        end = gens[i + 1]["created_at"] if i + 1 < len(gens) else float("inf")
        mine = [r for r in reports if g["created_at"] <= r[0] < end]
        out.append({
            "id": g["id"], "status": g["status"], "good": g.get("good", False),
            "image": (g.get("image") or {}).get("ref"), "recipe_sha256": g["recipe_sha256"][:12],
            "boot": {k: g["boot"].get(k) for k in ("cache", "time_to_ready_s", "regression")},
            "drift": g.get("drift", []), "rolled_back_from": g.get("rolled_back_from"),
            "promotion": {k: v for k, v in (g.get("promotion") or {}).items() if k != "smoke"},
            "reports": [r[1] for r in mine],
        })  # fmt: skip
    return list(reversed(out))
