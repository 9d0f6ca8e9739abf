"""What a bench run measures: the operator's choices over the full run's (or --quick's) defaults,
and the lane recipe's [bench.quality] (its skip, its per-request deadline)."""

from __future__ import annotations

from dataclasses import dataclass

from .probes import DecodeProbe
from .quality import QualitySettings
from .settings import BenchSettings
from .sweep import SweepSettings
from .target import BenchTarget


@dataclass(frozen=True)
class BenchChoices:
    """The bench's options as the operator gave them; None takes the full run's (or --quick's) value."""

    quick: bool = False
    prompt_tokens: int | None = None
    max_tokens: int | None = None
    pp: tuple[int, ...] | None = None
    tg: tuple[int, ...] | None = None
    depths: tuple[int, ...] | None = None
    runs: int | None = None
    concurrency: tuple[int, ...] | None = None
    requests: int | None = None
    sweep_prompt_tokens: int | None = None
    sweep_max_tokens: int | None = None
    quality: bool | None = None  # None: run it unless --quick or the recipe skips it
    smoke: bool = True
    quality_full: bool = False
    quality_scenarios: str | None = None  # 'TC-01,TC-07' or 'TC-01 TC-07'

    def tag(self, tag: str | None) -> str:
        """The report's tag: the operator's, else `quick` or `bench`."""
        return tag or ("quick" if self.quick else "bench")


def bench_settings(c: BenchChoices, target: BenchTarget) -> tuple[BenchSettings, str | None]:
    """The run's settings, and why quality does not run when the recipe's [bench.quality] skip
    left it out (an explicit --quality runs it anyway; None: nothing to say)."""
    base = BenchSettings.quick() if c.quick else BenchSettings()
    sweep = SweepSettings(
        levels=c.concurrency or base.sweep.levels,
        requests_per_level=c.requests or base.sweep.requests_per_level,
        prompt_tokens=c.sweep_prompt_tokens or base.sweep.prompt_tokens,
        max_tokens=c.sweep_max_tokens or base.sweep.max_tokens,
    )
    want_quality = (not c.quick) if c.quality is None else c.quality
    quality_note = None
    if c.quality is None and want_quality and target.quality_skip:
        want_quality = False
        quality_note = (
            f"quality not run: {target.quality_skip} (the recipe's [bench.quality] skip; "
            "--quality runs it anyway)"
        )
    request_s = target.quality_request_timeout_s or QualitySettings.request_timeout_s
    quality = QualitySettings(
        short=not c.quality_full,
        scenarios=tuple(s for s in (c.quality_scenarios or "").replace(",", " ").split()),
        request_timeout_s=request_s,
    )
    settings = BenchSettings(
        probe=DecodeProbe(c.prompt_tokens or base.probe.prompt_tokens, c.max_tokens or base.probe.max_tokens),
        pp=c.pp or base.pp,
        tg=c.tg or base.tg,
        depths=c.depths or base.depths,
        table_runs=c.runs or base.table_runs,
        sweep=sweep,
        quality=quality if want_quality else None,
        smoke=c.smoke,
        is_quick=base.is_quick,
    )
    return settings, quality_note
