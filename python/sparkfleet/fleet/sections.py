"""A lane recipe's sections as frozen dataclasses, built once when the inventory loads the recipe.

The recipe's JSON Schema (`schema/recipe.schema.json`) is the validator: by the time
`recipe_sections` runs, every key has its type, every enum its value, every required key is there.
This module only gives each section names, so no reader spells a TOML key or walks a dictionary.

A field is None where the recipe leaves the key out and the reader's own default applies (a
section's default can depend on the lane, as `[world] tp` does on its hosts), or where the
reader must tell "not given" from a value (a `[gateway]` table, even empty, puts the lane behind
the gateway). A section that changes behaviour by being there at all (`[launch]`, `[engram]`,
`[gateway]`, `[kit]`) is None when absent; the others are always present, empty by default.

Why in fleet/ and not lane/: the inventory builds a `Lane` with its sections, and fleet/ reads
some of them itself (replica sets, ranks, receipt roots, kit trees); lane/ stands on fleet/, so
the sections' types live where both reach them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class WorldSection:
    """`[world]`: the lane's parallel shape as declared (launch's WorldShape fills what is left out
    from the lane's hosts: tp = their number, ranks = their order)."""

    tp: int | None = None
    ep: int | None = None
    pad: int | None = None
    launcher: str | None = None
    ranks: dict[str, int] = field(default_factory=dict)  # host -> node rank, as declared (may be partial)


@dataclass(frozen=True)
class LaunchSection:
    """`[launch]`: how sparkfleet serves the lane, as written. `lane.recipe.launch_recipe` resolves it
    against the fleet's pins (image, model, kit trees) and fills its defaults; the sub-tables read
    only there stay the schema-checked tables they are, handed to their own builders."""

    command: tuple[str, ...]
    image: str | None = None  # an oci pin's name
    image_build: str | None = None  # the flake package the image is built from
    runtime: str | None = None
    entrypoint: str | None = None
    worker_args: tuple[str, ...] = ()
    model_mounts: dict[str, str] = field(default_factory=dict)
    port: int | None = None
    dist_port: int | None = None
    served_model_name: str | None = None
    model: str | None = None  # an hf pin of the lane's [[models]]
    hub_mount: str | None = None
    cache_dir: str | None = None
    cache_mount: str | None = None
    receipt_roots: tuple[str, ...] = ()
    ready_signatures: tuple[str, ...] | None = None
    weight_load_regex: str | None = None
    fabric: str | None = None
    gpus: str | None = None
    shm_size: str | None = None
    needs_gib: float | None = None
    env: dict[str, str] = field(default_factory=dict)  # may hold secrets: never shown
    node_env: dict[str, str] = field(default_factory=dict)
    trees: tuple[dict[str, Any], ...] = ()  # [[launch.trees]], for fleet.kittrees.host_trees
    display: dict[str, Any] | None = None  # [launch.display], for lane.recipe.display_need
    cache_seed: dict[str, Any] | None = None  # [launch.cache_seed], for lane.recipe.seed_need
    container: dict[str, Any] = field(default_factory=dict)  # for lane.limits.container_limits
    timeouts: dict[str, float] = field(default_factory=dict)
    memory: dict[str, float] = field(default_factory=dict)  # for lane.recipe.memory_need
    canary: dict[str, Any] = field(default_factory=dict)  # for lane.recipe.canary_settings
    boot_cache: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WatchdogSection:
    """`[watchdog]`: what a rank's stop takes down with it, "rank" (its node's ranks) or "lane"."""

    scope: str = "rank"


@dataclass(frozen=True)
class WatchSection:
    """`[watch]`: `sparkfleet watch`'s known-answer probe and restart budget; None: its default."""

    interval_s: float | None = None
    latency_s: float | None = None
    prompt: str | None = None
    expect: str | None = None
    max_restarts: int | None = None
    window_s: float | None = None
    backoff_s: float | None = None


@dataclass(frozen=True)
class SmokeCaseSection:
    """One `[[smoke.cases]]`: a prompt, the answer it must contain, its own token cap if any."""

    prompt: str
    expect: str
    max_tokens: int | None = None


@dataclass(frozen=True)
class SmokeSection:
    """`[smoke]`: the prompts `sparkfleet smoke` asks at temperature 0 (and `watch` by default)."""

    max_tokens: int | None = None
    cases: tuple[SmokeCaseSection, ...] = ()


@dataclass(frozen=True)
class BenchQualitySection:
    """`[bench.quality]`: why the lane's bench runs no quality phase, and each request's deadline."""

    skip: str | None = None
    request_timeout_s: float | None = None


@dataclass(frozen=True)
class BenchSection:
    """`[bench]`: where the bench asks, its key's variable, the baseline report and how far a new
    report may fall behind it."""

    baseline: str | None = None
    url: str | None = None
    api_key_env: str | None = None
    quality: BenchQualitySection = BenchQualitySection()
    thresholds: dict[str, float] = field(default_factory=dict)  # Thresholds field -> value


@dataclass(frozen=True)
class KitReference:
    """One `[[kit.reference]]`: a figure the kit publishes, with its source."""

    metric: str
    value: float
    source: str
    unit: str = "tok/s"


@dataclass(frozen=True)
class KitSection:
    """`[kit]`: the kit this lane runs as its own launcher does; read by people, tests and the
    view's decode reference, never by launch."""

    pin: str
    entry: str
    commit: str | None = None
    image: str | None = None
    references: tuple[KitReference, ...] = ()


@dataclass(frozen=True)
class ViewSection:
    """`[view]`: what the fleet view holds the lane's decode against."""

    reference_tps: float | None = None
    decode_floor_pct: float | None = None


@dataclass(frozen=True)
class RooflineSection:
    """`[roofline]`: what the checkpoint files cannot tell the roofline."""

    drafter: str | None = None  # the drafter's hf pin
    draft_tokens: int | None = None
    engram_rows_per_token: int | None = None
    kv_cache_bytes: int = 2  # bytes per KV-cache element (1 = an FP8 cache)


@dataclass(frozen=True)
class EngramTableSection:
    """One `[[engram.tables]]`: a layer and either one tensor's `name` or several `parts`."""

    layer: int
    name: str | None = None
    parts: tuple[str, ...] | None = None


@dataclass(frozen=True)
class EngramSection:
    """`[engram]` as written: `engram.config.engram_spec` checks it against itself and the pins."""

    pin: str
    layout: str | None = None
    shards_rank: int | None = None
    tables: tuple[EngramTableSection, ...] | None = None
    pattern: str | tuple[str, ...] | None = None
    layers: tuple[int, ...] | None = None
    rows: dict[str, int] | None = None  # layer (as written, a TOML key) -> row count
    row_bytes: int | None = None
    out_dir: str | None = None
    mount: str | None = None


@dataclass(frozen=True)
class GatewaySection:
    """`[gateway]`: the lane serves through `sparkfleet gateway`, with this policy and copies."""

    policy: str | None = None
    replicas: tuple[tuple[str, ...], ...] | None = None  # host sets; the inventory checked them


@dataclass(frozen=True)
class RecipeSections:
    """Every section of a lane's recipe but `[lane]` and `[[models]]` (which `Lane` holds itself)."""

    world: WorldSection = WorldSection()
    launch: LaunchSection | None = None
    watchdog: WatchdogSection = WatchdogSection()
    watch: WatchSection = WatchSection()
    smoke: SmokeSection = SmokeSection()
    bench: BenchSection = BenchSection()
    kit: KitSection | None = None
    view: ViewSection = ViewSection()
    roofline: RooflineSection = RooflineSection()
    engram: EngramSection | None = None
    gateway: GatewaySection | None = None


def _tuple(value: Any) -> tuple | None:
    return None if value is None else tuple(value)


def _launch(doc: dict[str, Any]) -> LaunchSection:
    return LaunchSection(
        command=tuple(doc["command"]),
        image=doc.get("image"),
        image_build=doc.get("image_build"),
        runtime=doc.get("runtime"),
        entrypoint=doc.get("entrypoint"),
        worker_args=tuple(doc.get("worker_args", ())),
        model_mounts=dict(doc.get("model_mounts", {})),
        port=doc.get("port"),
        dist_port=doc.get("dist_port"),
        served_model_name=doc.get("served_model_name"),
        model=doc.get("model"),
        hub_mount=doc.get("hub_mount"),
        cache_dir=doc.get("cache_dir"),
        cache_mount=doc.get("cache_mount"),
        receipt_roots=tuple(doc.get("receipt_roots", ())),
        ready_signatures=_tuple(doc.get("ready_signatures")),
        weight_load_regex=doc.get("weight_load_regex"),
        fabric=doc.get("fabric"),
        gpus=doc.get("gpus"),
        shm_size=doc.get("shm_size"),
        needs_gib=doc.get("needs_gib"),
        env=dict(doc.get("env", {})),
        node_env=dict(doc.get("node_env", {})),
        trees=tuple(doc.get("trees", ())),
        display=doc.get("display"),
        cache_seed=doc.get("cache_seed"),
        container=dict(doc.get("container", {})),
        timeouts=dict(doc.get("timeouts", {})),
        memory=dict(doc.get("memory", {})),
        canary=dict(doc.get("canary", {})),
        boot_cache=dict(doc.get("boot_cache", {})),
    )


def _engram(doc: dict[str, Any]) -> EngramSection:
    pattern = doc.get("pattern")
    tables = doc.get("tables")
    return EngramSection(
        pin=doc["pin"],
        layout=doc.get("layout"),
        shards_rank=doc.get("shards_rank"),
        tables=None
        if tables is None
        else tuple(EngramTableSection(t["layer"], t.get("name"), _tuple(t.get("parts"))) for t in tables),
        pattern=pattern if pattern is None or isinstance(pattern, str) else tuple(pattern),
        layers=_tuple(doc.get("layers")),
        rows=None if "rows" not in doc else dict(doc["rows"]),
        row_bytes=doc.get("row_bytes"),
        out_dir=doc.get("out_dir"),
        mount=doc.get("mount"),
    )


def _kit(doc: dict[str, Any]) -> KitSection:
    return KitSection(
        pin=doc["pin"],
        entry=doc["entry"],
        commit=doc.get("commit"),
        image=doc.get("image"),
        references=tuple(
            KitReference(r["metric"], r["value"], r["source"], r.get("unit", KitReference.unit))
            for r in doc.get("reference", ())
        ),
    )


def _gateway(doc: dict[str, Any]) -> GatewaySection:
    replicas = doc.get("replicas")
    return GatewaySection(doc.get("policy"), None if replicas is None else tuple(tuple(s) for s in replicas))


def recipe_sections(doc: dict[str, Any]) -> RecipeSections:
    """The sections of a schema-valid recipe document (the parsed TOML)."""
    world = doc.get("world", {})
    watch = doc.get("watch", {})
    smoke = doc.get("smoke", {})
    bench = doc.get("bench", {})
    quality = bench.get("quality", {})
    view = doc.get("view", {})
    roofline = doc.get("roofline", {})
    gateway = doc.get("gateway")
    return RecipeSections(
        world=WorldSection(
            tp=world.get("tp"),
            ep=world.get("ep"),
            pad=world.get("pad"),
            launcher=world.get("launcher"),
            ranks=dict(world.get("ranks", {})),
        ),
        launch=_launch(doc["launch"]) if "launch" in doc else None,
        watchdog=WatchdogSection(doc.get("watchdog", {}).get("scope", WatchdogSection.scope)),
        watch=WatchSection(**{k: watch.get(k) for k in WatchSection.__dataclass_fields__}),
        smoke=SmokeSection(
            max_tokens=smoke.get("max_tokens"),
            cases=tuple(
                SmokeCaseSection(c["prompt"], c["expect"], c.get("max_tokens"))
                for c in smoke.get("cases", ())
            ),
        ),
        bench=BenchSection(
            baseline=bench.get("baseline"),
            url=bench.get("url"),
            api_key_env=bench.get("api_key_env"),
            quality=BenchQualitySection(quality.get("skip"), quality.get("request_timeout_s")),
            thresholds=dict(bench.get("thresholds", {})),
        ),
        kit=_kit(doc["kit"]) if "kit" in doc else None,
        view=ViewSection(view.get("reference_tps"), view.get("decode_floor_pct")),
        roofline=RooflineSection(
            drafter=roofline.get("drafter"),
            draft_tokens=roofline.get("draft_tokens"),
            engram_rows_per_token=roofline.get("engram_rows_per_token"),
            kv_cache_bytes=roofline.get("kv_cache_bytes", RooflineSection.kv_cache_bytes),
        ),
        engram=_engram(doc["engram"]) if "engram" in doc else None,
        gateway=None if gateway is None else _gateway(gateway),
    )
