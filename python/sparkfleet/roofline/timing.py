"""Repeat-and-take-the-best timing, kept apart from any device so it can be tested on a CPU.

A first run of a GPU kernel pays for CUDA context creation, cuBLAS's handle and workspace, lazy
module loading and clocks still at idle (a cold `measure` reads 11 % and 12 % of an H200's copy
and matmul rates). So a probe runs its step a few times untimed, then times several trials of
many back-to-back iterations, and reports the best trial (the closest to what the hardware does)
with the spread between best and worst (how much to trust it). The clock is pluggable: CUDA events
on a GPU (they time the device, not the host's launch queue), `perf_counter` on a CPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

WARMUPS = 3
ITERATIONS = 20
TRIALS = 5
# No minimum warm-up time by default: on an H200, 3 warm-ups bring the clocks from idle
# to 1980 MHz, and bf16 matmuls then run ~795 TFLOP/s for ~60 ms before the chip settles at ~680
# (power). The first trials measure the peak the reference measures; the later ones show
# the settling in the spread.
MIN_WARMUP_S = 0.0


class Clock(Protocol):
    """Times a stretch of queued work: `start()`, then `stop()` waits for it and gives seconds."""

    def start(self) -> None: ...

    def stop(self) -> float: ...


class WallClock:
    """`perf_counter` around work that runs synchronously (the CPU's)."""

    def __init__(self) -> None:
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        return time.perf_counter() - self._t0


class CudaEventClock:
    """A pair of CUDA events on the current stream: device time, with the host's launch cost outside."""

    def __init__(self, torch: Any) -> None:
        self._torch = torch
        self._begin = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def start(self) -> None:
        self._begin.record()

    def stop(self) -> float:
        self._end.record()
        self._end.synchronize()
        return self._begin.elapsed_time(self._end) / 1000.0  # ms -> s


@dataclass(frozen=True)
class Trials:
    """Seconds per iteration of each timed trial (after the warm-ups)."""

    per_iteration_s: tuple[float, ...]
    warmups: int
    iterations: int

    @property
    def best_s(self) -> float:
        return min(self.per_iteration_s)

    @property
    def worst_s(self) -> float:
        return max(self.per_iteration_s)

    @property
    def spread(self) -> float:
        """(worst - best) / best: 0.02 means the slowest trial took 2 % longer than the fastest."""
        return (self.worst_s - self.best_s) / self.best_s

    def rate(self, work: float) -> float:
        """`work` units per second at the best trial."""
        return work / self.best_s

    def describe(self) -> str:
        return (
            f"best of {len(self.per_iteration_s)} trials of {self.iterations} iterations after "
            f"{self.warmups}+ warm-ups; spread {100 * self.spread:.1f} %"
        )


def time_trials(
    step: Callable[[], object],
    clock: Clock,
    warmups: int = WARMUPS,
    iterations: int = ITERATIONS,
    trials: int = TRIALS,
    min_warmup_s: float = MIN_WARMUP_S,
) -> Trials:
    """Run `step` `warmups` times (and on until `min_warmup_s` passed), then time `trials` x `iterations`.

    Each trial is timed as a whole (one clock pair around `iterations` calls), so per-call launch
    gaps on a GPU are hidden by the queue the way a real workload hides them.
    """
    if warmups < 1 or iterations < 1 or trials < 1:
        raise ValueError("warmups, iterations and trials must each be at least 1")
    done, warmed = 0, 0.0
    while done < warmups or warmed < min_warmup_s:
        clock.start()
        step()
        warmed += clock.stop()
        done += 1
        if done >= 50 * warmups:  # a step far shorter than the clock's resolution: enough
            break
    per_iteration = []
    for _ in range(trials):
        clock.start()
        for _ in range(iterations):
            step()
        seconds = clock.stop()
        if seconds > 0:
            per_iteration.append(seconds / iterations)
    if not per_iteration:
        raise ValueError("every trial timed zero seconds: the clock cannot resolve this step")
    return Trials(tuple(per_iteration), done, iterations)
