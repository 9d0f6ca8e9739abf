"""What one bench run asks of a lane: the decode probe, the pp/tg table, the sweep, quality, smoke.

Its own module because the run (run.py) and its price (estimate.py) both read it, and the run uses
the price: with the settings beside the run, the two would import each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from .probes import DecodeProbe
from .quality import QualitySettings
from .sweep import SweepSettings


@dataclass(frozen=True)
class BenchSettings:
    probe: DecodeProbe = DecodeProbe()
    pp: tuple[int, ...] = (512, 2048)
    tg: tuple[int, ...] = (128,)
    depths: tuple[int, ...] = (0, 4096)
    table_runs: int = 3  # at least 3, so every table figure has a confidence interval
    sweep: SweepSettings = SweepSettings()
    quality: QualitySettings | None = QualitySettings()
    smoke: bool = True
    is_quick: bool = False  # recorded: a --quick run is never compared with a full one unforced
    spec_sample_s: float = 0.5  # how often the SGLang accept-length gauge is sampled

    @classmethod
    def quick(cls) -> BenchSettings:
        """Seconds, not minutes: for demos and a first look at a fresh lane (no quality run)."""
        return cls(
            probe=DecodeProbe(128, 64),
            pp=(128,),
            tg=(32,),
            depths=(0,),
            table_runs=1,
            sweep=SweepSettings(levels=(1, 2), requests_per_level=2, prompt_tokens=64, max_tokens=32),
            quality=None,
            is_quick=True,
        )

    @property
    def ttft_runs(self) -> int:
        return max(self.table_runs, 3)  # at least 3: the headline TTFT carries a CI

    def steps(self, smoke_cases: int) -> int:
        table = len(self.depths) * (len(self.pp) + len(self.tg)) * self.table_runs
        sweep = sum(max(self.sweep.requests_per_level, c) for c in self.sweep.levels)
        smoke = smoke_cases if self.smoke else 0
        return 1 + smoke + 1 + self.ttft_runs + table + sweep + (1 if self.quality else 0)
