"""How long a bench will take: its plan (every request it sends) priced at the lane's own rates.

The plan is the settings: the decode probe, the TTFT runs, each pp/tg row at each depth, each
sweep level's requests in waves of its concurrency. Once the decode probe has measured the lane's
decode and prefill rates, each request costs its prefill (prompt tokens / prefill rate) plus its
generation (tokens / decode rate); a sweep wave costs one request's time (the engine batches it),
so the estimate is a floor where the batch slows each stream. The quality phase cannot be priced
from rates (how many turns a scenario takes is the model's), so it is bounded instead: so many
scenarios, each request cut at `request_timeout_s`, the whole run at `timeout_s`. As scenarios
finish, the mean so far prices the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .settings import BenchSettings

SHORT_SCENARIOS = 15  # tool-eval-bench's --short: the core 15


@dataclass(frozen=True)
class BenchEstimate:
    """The rest of a bench after the decode probe, at the rates the probe measured."""

    seconds: float  # ttft, the pp/tg table and the sweep (everything left but quality)
    at_s: float  # when it was made: seconds into the run (the decode probe's end)
    decode_tps: float
    prefill_tps: float
    quality_scenarios: int | None  # None: no quality phase; 0: tool-eval-bench's whole pool
    quality_request_s: float | None
    quality_limit_s: float | None

    def line(self) -> str:
        """"about 2 min 10 s more at the measured 50.0 tok/s decode, 1990 tok/s prefill; quality: …"."""
        text = (
            f"about {duration(self.seconds)} more (ttft, pp/tg table, sweep) at the measured "
            f"{self.decode_tps:.1f} tok/s decode, {self.prefill_tps:.0f} tok/s prefill"
        )
        if self.quality_scenarios is None:
            return text
        count = f"{self.quality_scenarios} scenarios" if self.quality_scenarios else "every scenario"
        return (
            f"{text}; then quality: {count}, each request cut at {self.quality_request_s:g} s, "
            f"the whole at most {duration(self.quality_limit_s or 0)}"
        )


def duration(seconds: float) -> str:
    """`45 s`, `2 min 10 s`, `1 h 05 min`."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def estimate(
    settings: BenchSettings, decode_tps: float, prefill_tps: float, at_s: float = 0.0
) -> BenchEstimate:
    """Price what is left of the plan after the decode probe (both rates > 0), made `at_s` into the run."""

    def request(prompt: int, generate: int) -> float:
        return prompt / prefill_tps + max(generate - 1, 0) / decode_tps

    total = settings.ttft_runs * request(settings.probe.prompt_tokens, 1)
    runs = settings.table_runs
    for depth in settings.depths:
        for pp in settings.pp:  # a depth's context is sent once to warm the cache, then the pp
            total += runs * ((request(depth, 1) if depth else 0.0) + request(pp, 1))
        for tg in settings.tg:
            total += runs * request(max(depth, 8), tg)
    sweep = settings.sweep
    for c in sweep.levels:
        waves = math.ceil(max(sweep.requests_per_level, c) / c)
        total += waves * request(sweep.prompt_tokens, sweep.max_tokens)
    q = settings.quality
    scenarios = None
    if q is not None:
        scenarios = len(q.scenarios) if q.scenarios else SHORT_SCENARIOS if q.short else 0
    return BenchEstimate(
        seconds=total,
        at_s=at_s,
        decode_tps=decode_tps,
        prefill_tps=prefill_tps,
        quality_scenarios=scenarios,
        quality_request_s=q.request_timeout_s if q else None,
        quality_limit_s=q.timeout_s if q else None,
    )


def quality_left(done: int, total: int, elapsed_s: float) -> str:
    """"about 4 min 10 s left" for the scenarios still to run, at the mean of those done so far."""
    if done <= 0 or total <= done:
        return ""
    return f"about {duration(elapsed_s / done * (total - done))} left"
