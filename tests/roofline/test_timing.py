"""Repeat-and-take-the-best timing (roofline/timing.py) and the GPU probes' sizing, on a CPU.

The clock is scripted where the arithmetic must be exact, and real (`perf_counter` around torch's
CPU matmul) where the point is that a first, cold call stays out of the figure.
"""

from __future__ import annotations

import pytest

from sparkfleet.roofline.measure import copy_probe_bytes, cpu_copy_rate, gpu_rates, matmul_probe_side
from sparkfleet.roofline.timing import Trials, WallClock, time_trials

GIB = 1024**3


class ScriptedClock:
    """Answers each stop() with the next scripted duration; counts the steps run in between."""

    def __init__(self, durations: list[float]) -> None:
        self.durations = list(durations)
        self.steps_per_span: list[int] = []
        self.steps = 0

    def step(self) -> None:
        self.steps += 1

    def start(self) -> None:
        self.steps = 0

    def stop(self) -> float:
        self.steps_per_span.append(self.steps)
        return self.durations.pop(0)


def test_warmups_stay_out_of_the_timed_trials_and_the_best_trial_is_the_figure() -> None:
    # 3 warm-ups (the first one cold: 5 s), then 4 trials of 10 iterations.
    clock = ScriptedClock([5.0, 0.2, 0.2, 1.0, 1.2, 1.1, 1.25])
    trials = time_trials(clock.step, clock, warmups=3, iterations=10, trials=4, min_warmup_s=0.0)
    assert clock.steps_per_span == [1, 1, 1, 10, 10, 10, 10]
    assert trials.per_iteration_s == pytest.approx((0.1, 0.12, 0.11, 0.125))
    assert trials.best_s == pytest.approx(0.1)
    assert trials.spread == pytest.approx(0.25)  # the slowest trial took 25 % longer than the best
    assert trials.rate(8e9) == pytest.approx(80e9)
    assert "best of 4 trials of 10 iterations" in trials.describe() and "25.0 %" in trials.describe()


def test_warming_goes_on_until_the_minimum_time_has_passed() -> None:
    # Clocks ramp from idle: 3 warm-ups of 0.05 s are not enough for 0.2 s, so it runs 4 of them.
    clock = ScriptedClock([0.05] * 4 + [1.0])
    trials = time_trials(clock.step, clock, warmups=3, iterations=2, trials=1, min_warmup_s=0.2)
    assert trials.warmups == 4 and clock.steps_per_span == [1, 1, 1, 1, 2]


def test_a_clock_that_cannot_resolve_the_step_is_an_error_not_an_infinite_rate() -> None:
    clock = ScriptedClock([0.0] * 10)
    with pytest.raises(ValueError, match="zero seconds"):
        time_trials(clock.step, clock, warmups=1, iterations=1, trials=2, min_warmup_s=0.0)
    with pytest.raises(ValueError):
        time_trials(clock.step, clock, warmups=0)


@pytest.mark.slow
def test_a_cold_first_call_does_not_land_in_the_figure_with_torch_on_cpu() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(64, 64)
    calls = []

    def step() -> None:
        if not calls:  # the first call pays a start-up cost, like cuBLAS's handle on a GPU
            import time

            time.sleep(1.0)
        calls.append(1)
        torch.mm(x, x)

    trials = time_trials(step, WallClock(), warmups=1, iterations=5, trials=3, min_warmup_s=0.0)
    assert len(calls) == 1 + 15
    assert trials.worst_s * 5 < 1.0  # the 1 s start-up is in no trial (each trial is 5 calls)
    assert trials.best_s <= trials.worst_s and trials.spread >= 0


def test_probes_are_sized_to_the_device() -> None:
    assert copy_probe_bytes(139 * GIB) == 4 * GIB  # an H200: capped at 4 GiB
    assert copy_probe_bytes(8 * GIB) == 2 * GIB  # a quarter of free memory
    assert copy_probe_bytes(100 * 1024**2) == 64 * 1024**2  # never below 64 MiB
    assert copy_probe_bytes(8 * GIB + 12345) % (64 * 1024**2) == 0
    assert matmul_probe_side(139 * GIB) == 8192
    assert matmul_probe_side(1 * GIB) == 4096  # 3 x 8192^2 x 2 B = 384 MiB > 256 MiB
    assert matmul_probe_side(0) == 1024


@pytest.mark.slow
def test_cpu_copy_rate_reports_its_spread_and_no_gpu_figure_without_cuda() -> None:
    rate = cpu_copy_rate(8 * 1024**2, trials=3)
    assert rate.nbytes == 2 * 8 * 1024**2 and rate.value > 0 and rate.spread is not None
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        assert gpu_rates() == {}


def test_trials_of_one_have_no_spread() -> None:
    assert Trials((0.5,), 3, 20).spread == 0.0


def test_gpu_rates_on_a_real_gpu() -> None:
    """Runs where CUDA is (the device machine; skipped in CI): both figures, warm, with a spread."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    rates = gpu_rates(trials=3)
    assert set(rates) == {"memory_bandwidth", "peak_bf16"}
    for rate in rates.values():
        assert rate.value > 0 and rate.spread is not None and "CUDA events" in rate.method
    # A warm copy of >= 64 MiB on any CUDA GPU of the last decade moves over 100 GB/s.
    assert rates["memory_bandwidth"].value > 100e9
