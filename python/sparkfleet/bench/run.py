"""One benchmark run, start to finish: warmup, smoke, decode probe, pp/tg table, sweep, quality.

`run_bench` returns a `BenchRun` record; `sparkfleet.bench.report` writes it. Any failed step puts the run
in status "failed" with the step's reason, and that step carries no number. A failed warmup stops
the run early: nothing after it could be trusted.
"""

from __future__ import annotations

import dataclasses
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from .. import __version__
from ..base.errors import SparkfleetError
from ..base.units import wire_bytes
from .client import Endpoint, chat_request, discover_model, stream_chat
from .engine_tokens import SIZED_ENGINE, SIZED_LOCAL, SIZED_WORDS, engine_tokenizer
from .estimate import BenchEstimate, duration, estimate, quality_left
from .metrics import measure
from .probes import (
    LANE_BUDGET_HINT,
    DecodeProbeResult,
    SmokeOutcome,
    TableRow,
    TtftFigure,
    client_round_trip,
    cold_prefill_rate,
    run_decode_probe,
    run_pp,
    run_tg,
    run_ttft,
    smoke,
    within_ceiling,
)
from .prompts import run_nonce
from .quality import QualityResult, run_quality
from .settings import BenchSettings
from .spec_decode import SpecAccept, SpecSampler
from .sweep import SweepLevel, run_level
from .target import BenchTarget
from .tokens import TokenCounter

REPORT_SCHEMA = "sparkfleet.bench/1"


class Progress(Protocol):
    """What the run tells a display: how many steps in all, each step as it finishes, and lines
    that stay (the estimate, each quality scenario's verdict as it lands)."""

    def start(self, total: int) -> None: ...
    def step(self, label: str, advance: int = 1) -> None: ...
    def note(self, line: str) -> None: ...


class NoProgress:
    def start(self, total: int) -> None:
        pass

    def step(self, label: str, advance: int = 1) -> None:
        pass

    def note(self, line: str) -> None:
        pass


@dataclass
class BenchRun:
    """The record a report is made of (JSON is `dataclasses.asdict` of this)."""

    tag: str
    created_utc: str
    status: str = "ok"  # ok | failed | interrupted (Ctrl-C: what was measured until then)
    failures: list[str] = field(default_factory=list)
    schema: str = REPORT_SCHEMA
    sparkfleet_version: str = __version__
    url: str = ""
    lane: str | None = None
    hosts: list[str] = field(default_factory=list)
    pins: dict[str, dict[str, Any]] = field(default_factory=dict)
    recipe_sha256: str | None = None
    weights: str = ""  # "weights from NAS on dgx2 (10 files)": the run measured a NAS-served rank
    model: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    # per host: HostFingerprint.to_dict() (sparkfleet.remote.hoststack) before and after the run
    fingerprints: dict[str, dict[str, Any]] = field(default_factory=dict)
    fingerprints_after: dict[str, dict[str, Any]] = field(default_factory=dict)
    warmup_error: str | None = None
    smoke: list[SmokeOutcome] = field(default_factory=list)
    decode_probe: DecodeProbeResult | None = None
    ttft: TtftFigure | None = None  # the headline TTFT: the probe's prompt, repeated, with a CI
    table: list[TableRow] = field(default_factory=list)
    sweep: list[SweepLevel] = field(default_factory=list)
    spec_accept: SpecAccept | None = None
    client_rtt_s: float | None = None  # fastest GET /v1/models: the client's own cost (no engine step)
    cold_prefill_tps: float | None = None  # best pp at d0: the ceiling for every pp at depth
    quality: QualityResult | None = None
    quality_note: str | None = None
    # after the decode probe: the rest of the plan priced at the rates it measured (estimate.py)
    estimate: BenchEstimate | None = None
    token_sources: list[str] = field(default_factory=list)
    prompt_sizing: str | None = None  # what a prompt's size counts: SIZED_LOCAL | SIZED_ENGINE | SIZED_WORDS
    # How far from the physical limit (roofline/section.py), for a lane; None for a bare --url.
    roofline: dict[str, Any] | None = None
    # through `sparkfleet gateway`: its policy and replicas (each sweep level says who served what)
    gateway: dict[str, Any] | None = None
    duration_s: float = 0.0
    client_cpu_s: float = 0.0

    def fail(self, reason: str) -> None:
        self.status = "failed"
        self.failures.append(reason)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_bench(
    target: BenchTarget,
    settings: BenchSettings,
    tag: str,
    *,
    model: str | None = None,
    tokenizer: TokenCounter | None = None,
    progress: Progress | None = None,
    quality_runner: Callable[..., QualityResult] = run_quality,
    timeout: float = 600.0,
    fingerprint: Callable[[], dict[str, dict[str, Any]]] | None = None,
    quality_note: str | None = None,
) -> BenchRun:
    """`fingerprint` (when given) returns {host: fingerprint dict}; it is taken before and after.
    `quality_note` says why there is no quality phase (settings.quality None), for the report."""
    shown = progress or NoProgress()
    phase = ["connect"]

    class _Phases:
        """Names each phase when it starts (step with advance 0), not only when its first step ends."""

        def start(self, total: int) -> None:
            shown.start(total)

        def step(self, label: str, advance: int = 1) -> None:
            phase[0] = label
            shown.step(label, advance)

        def note(self, line: str) -> None:
            shown.note(line)

    progress = _Phases()
    started, cpu0 = time.monotonic(), _cpu_seconds()
    run = BenchRun(
        tag=tag,
        created_utc=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        url=target.url,
        lane=target.lane,
        hosts=list(target.hosts),
        pins=target.pins,
        recipe_sha256=target.recipe_sha256,
        weights=target.weights,
        gateway=target.gateway,
        settings=dataclasses.asdict(settings),
        fingerprints=fingerprint() if fingerprint else {},
    )
    nonce = run_nonce()
    counter = iter(range(10**9))

    def prefix() -> str:
        return f"sf-{nonce}-r{next(counter)}"

    sampler: SpecSampler | None = None
    try:
        try:
            endpoint = discover_model(target.endpoint(model, timeout))
        except SparkfleetError as exc:  # unreachable, booting, or an error page: a failed run, on record
            run.fail(f"server: {exc.message}")
            return run
        run.model = endpoint.model
        run.prompt_sizing = SIZED_LOCAL
        if tokenizer is None:
            tokenizer = engine_tokenizer(endpoint)
            run.prompt_sizing = SIZED_ENGINE if tokenizer is not None else SIZED_WORDS
        progress.start(settings.steps(len(target.smoke)))
        progress.step("warmup", 0)
        warm = measure(stream_chat(endpoint, chat_request(endpoint, "Say hello in one word.", 8)))
        progress.step("warmup")
        if not warm.ok:
            run.warmup_error = warm.error
            run.fail(f"warmup: {warm.error}")
            return run
        if settings.smoke:

            def smoked(outcome: SmokeOutcome) -> None:
                run.smoke.append(outcome)
                progress.step("smoke")
                if not outcome.passed:
                    run.fail(f"smoke {outcome.prompt!r}: {outcome.problem}")

            hint = LANE_BUDGET_HINT if target.lane else "run `sparkfleet smoke --url ... --max-tokens N`"
            smoke(endpoint, target.smoke, hint, on_case=smoked)
        progress.step("decode probe", 0)
        sampler = SpecSampler(endpoint, settings.spec_sample_s)
        run.decode_probe = run_decode_probe(endpoint, settings.probe, prefix(), tokenizer)
        progress.step("decode probe")
        if not run.decode_probe.metrics.ok:
            run.fail(f"decode probe: {run.decode_probe.metrics.error}")
        elif run.decode_probe.metrics.decode_tps is None:
            run.fail("decode probe: too few chunks to time decode (the server stopped early?)")
        else:
            run.estimate = _estimate(run.decode_probe, settings, time.monotonic() - started)
            if run.estimate is not None:
                progress.note(f"estimate: {run.estimate.line()}")
        progress.step("ttft", 0)
        run.ttft = run_ttft(endpoint, settings.probe.prompt_tokens, settings.ttft_runs, prefix, tokenizer)
        progress.step("ttft", settings.ttft_runs)
        if run.ttft.error:
            run.fail(f"ttft: {run.ttft.error}")
        run.client_rtt_s = client_round_trip(endpoint)
        for depth in settings.depths:
            for pp in settings.pp:
                progress.step(f"pp{pp} @ d{depth}", 0)
                row = run_pp(endpoint, pp, depth, settings.table_runs, prefix, run.client_rtt_s, tokenizer)
                run.table.append(row)
                progress.step(f"pp{pp} @ d{depth}", settings.table_runs)
                if row.error:
                    run.fail(f"pp{pp} @ d{depth}: {row.error}")
            for tg in settings.tg:
                progress.step(f"tg{tg} @ d{depth}", 0)
                row = run_tg(endpoint, tg, depth, settings.table_runs, prefix, tokenizer)
                run.table.append(row)
                progress.step(f"tg{tg} @ d{depth}", settings.table_runs)
                if row.error:
                    run.fail(f"tg{tg} @ d{depth}: {row.error}")
        _cap_prefill(run, endpoint, settings, prefix)
        for level in settings.sweep.levels:
            progress.step(f"sweep c={level}", 0)
            result = run_level(
                endpoint,
                level,
                settings.sweep,
                prefix,
                tokenizer,
                on_done=lambda level=level: progress.step(f"sweep c={level}"),
            )
            run.sweep.append(result)
            if not result.ok:
                run.fail(
                    f"sweep c={level}: {result.failed}/{result.requests} requests failed: "
                    f"{'; '.join(result.errors)}"
                )
        progress.step("spec accept", 0)
        run.spec_accept = sampler.stop()
        if settings.quality is None:
            run.quality_note = quality_note or "quality not run (--no-quality or --quick)"
        else:
            progress.step("quality", 0)
            now = {"label": "quality", "t0": 0.0, "bytes": 0, "frames": 0, "seen": {}, "done": 0}
            quality_t0 = time.monotonic()

            def quality_event(event: dict) -> None:
                """tool-eval-bench's own JSON-lines progress (each verdict as it lands, counting
                scenarios finished), and every second what the scenario running now has streamed
                (chunks, bytes) and for how long: a minutes-long scenario moves on the display."""
                kind, total, sid = event.get("event"), event.get("total"), event.get("scenario_id", "")
                if kind in ("scenario_start", "scenario_result") and total:
                    if kind == "scenario_result":
                        now["done"] += 1
                        progress.note(_verdict(event, now["done"], total, time.monotonic() - quality_t0))
                        now["label"] = f"quality {now['done']}/{total} done"
                    else:
                        now["label"] = f"quality {now['done']}/{total} done, {sid} running"
                        progress.step(now["label"], 0)
                    seen = now["seen"]
                    now.update(t0=seen.get("elapsed_s", 0.0), bytes=seen.get("bytes", 0),
                               frames=seen.get("frames", 0))  # fmt: skip
                elif event.get("event") == "traffic":
                    now["seen"] = event
                    live = f"{event['elapsed_s'] - now['t0']:.0f} s"
                    if "bytes" in event:
                        live += (
                            f", {event['frames'] - now['frames']} chunks "
                            f"({wire_bytes(event['bytes'] - now['bytes'])}) streamed"
                        )
                    progress.step(f"{now['label']} · {live}", 0)

            run.quality = endpoint.secrets.safe_all(
                quality_runner(
                    target.url,
                    endpoint.model or "",
                    settings.quality,
                    api_key=target.api_key(),
                    on_event=quality_event,
                )
            )
            progress.step("quality")
            if run.quality.status != "ok":
                run.fail(f"quality: {run.quality.error}")
    except KeyboardInterrupt:  # keep what was measured: the caller writes it, marked interrupted
        run.failures.append(f"interrupted (Ctrl-C) during {phase[0]}")
        run.status = "interrupted"
    finally:
        if sampler is not None:
            sampler.close()
        if fingerprint:
            run.fingerprints_after = fingerprint()
        run.token_sources = _token_sources(run)
        run.duration_s = time.monotonic() - started
        run.client_cpu_s = _cpu_seconds() - cpu0
    return run


def _estimate(probe: DecodeProbeResult, settings: BenchSettings, at_s: float) -> BenchEstimate | None:
    """The rest of the plan at the decode probe's rates (prefill: its prompt over its TTFT)."""
    m = probe.metrics
    if not m.decode_tps or not m.ttft_s:
        return None
    prompt = m.prompt_tokens or settings.probe.prompt_tokens
    return estimate(settings, m.decode_tps, prompt / m.ttft_s, at_s)


def _verdict(event: dict, done: int, total: int, elapsed_s: float) -> str:
    """One scenario's verdict as tool-eval-bench reports it, with the count and the time left."""
    points = event.get("points")
    took = event.get("duration_seconds")
    what = f"{event.get('status', '?')}" + (f", {points:g} points" if isinstance(points, int | float) else "")
    what += f", {duration(took)}" if isinstance(took, int | float) else ""
    left = quality_left(done, total, elapsed_s)
    count = f"{done}/{total} done" + (f", {left}" if left else "")
    return f"quality {event.get('scenario_id', '?')}: {what} · {count}"


def _cap_prefill(
    run: BenchRun, endpoint: Endpoint, settings: BenchSettings, prefix: Callable[[], str]
) -> None:
    """Hold every pp at depth to the engine's cold prefill rate (measured once if no d0 row ran)."""
    deep = [r for r in run.table if r.test.startswith("pp") and r.depth > 0 and r.tps_mean is not None]
    if not deep:
        return
    cold = cold_prefill_rate(run.table)
    if cold is None:
        reference = run_pp(endpoint, max(settings.pp), 0, 1, prefix, run.client_rtt_s)
        cold = cold_prefill_rate([reference])
    run.cold_prefill_tps = cold
    run.table = [within_ceiling(r, cold) for r in run.table]


def _token_sources(run: BenchRun) -> list[str]:
    sources = set()
    if run.decode_probe and run.decode_probe.metrics.token_source:
        sources.add(run.decode_probe.metrics.token_source)
    sources.update(r.token_source for r in run.table if r.token_source and r.test.startswith("tg"))
    for level in run.sweep:
        sources.update(level.token_sources)
    return sorted(sources)
