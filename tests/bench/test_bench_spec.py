"""Spec accept length of *this run*, within 5 % of truth, whatever the server's history.

Truth: the demo server sends the prefill token alone, then steps of 3 tokens (the last step of a
request may be shorter, so this run's mean is a little under 3.0); it counts its own steps and
their tokens (sparkfleet_demo:* in /metrics, which no engine has) and the test reads those before
and after the run. Each server also carries a history of 100,000 earlier steps at 1.5: a lifetime
average reads ~1.5, far from this run.
"""

from __future__ import annotations

import dataclasses

import pytest

from sparkfleet.bench.client import Endpoint
from sparkfleet.bench.run import BenchSettings, run_bench
from sparkfleet.bench.spec_decode import SOURCE_LIFETIME, SOURCE_SGLANG, SOURCE_VLLM, read_metrics
from sparkfleet.bench.target import for_url

pytestmark = pytest.mark.slow

SETTINGS = dataclasses.replace(BenchSettings.quick(), spec_sample_s=0.1)
HISTORY = ("--spec-history-drafts", "100000", "--spec-history-accept", "1.5")
SPEC = ("--tokens-per-chunk", "3", "--first-chunk-alone", "--decode-tps", "2000", "--prefill-tps", "100000")


def _truth(endpoint: Endpoint) -> tuple[float, float]:
    metrics = read_metrics(endpoint)
    return metrics["sparkfleet_demo:spec_steps_total"][0], metrics["sparkfleet_demo:spec_step_tokens_total"][
        0
    ]


def _accept(fake_lane, tmp_path, *flags):
    lane = fake_lane(*SPEC, *flags)
    steps0, tokens0 = _truth(Endpoint(lane.url))
    run = run_bench(for_url(lane.url, tmp_path), SETTINGS, "spec")
    steps1, tokens1 = _truth(Endpoint(lane.url))
    assert run.status == "ok", run.failures
    return run.spec_accept, (tokens1 - tokens0) / (steps1 - steps0)


def test_vllm_counter_deltas_measure_this_run(fake_lane, tmp_path):
    spec, truth = _accept(fake_lane, tmp_path, "--spec-metrics", "vllm", *HISTORY)
    assert spec.source == SOURCE_VLLM and abs(spec.value - truth) / truth < 0.05, (spec, truth)


def test_sglang_gauge_is_averaged_over_ranks_and_sampled_after_our_traffic(fake_lane, tmp_path):
    spec, truth = _accept(fake_lane, tmp_path, "--spec-metrics", "sglang", "--spec-ranks", "4", *HISTORY)
    assert spec.source == SOURCE_SGLANG and spec.samples >= 1
    # not 4x (ranks summed), not ~1.5 (the history)
    assert abs(spec.value - truth) / truth < 0.05, (spec, truth)


def test_lifetime_average_only_as_a_labelled_fallback(fake_lane, tmp_path):
    spec, truth = _accept(fake_lane, tmp_path, "--spec-metrics", "none", *HISTORY)
    assert spec.source == SOURCE_LIFETIME and spec.value < 0.7 * truth  # why it is only a fallback


def test_no_speculative_decoding_no_figure(fake_lane, tmp_path):
    lane = fake_lane("--decode-tps", "2000", "--prefill-tps", "100000")
    run = run_bench(for_url(lane.url, tmp_path), SETTINGS, "nospec")
    assert run.status == "ok" and run.spec_accept is None
