"""Decode tok/s within 1 % of truth on every way a real server streams speculative decoding.

Real servers send the prefill's token alone, then one chunk per verify step carrying 1 + accepted
draft tokens. Shapes: 1 token/chunk; 3/chunk; variable acceptance (1–5 per step, seeded); each with
continuous usage and with only a final usage record; each with and without a role-only opening
chunk. tg128 is the hard case: one token misplaced is 0.8 %.

The demo server is sleep-paced: on a loaded machine a chunk leaves late (never early), so the
configured rate is not always what it served. Each run is held to what the server did serve (first
written chunk to last, from its own clock: vLLM's request_decode_time), as tests/bench/
test_bench_estimators.py does, so the test measures the estimator, not the machine's load.
"""

from __future__ import annotations

import pytest

from sparkfleet.bench.client import Endpoint, chat_request, stream_chat
from sparkfleet.bench.probes import DecodeProbe, run_decode_probe
from sparkfleet.bench.spec_decode import read_metrics
from sparkfleet.bench.tokens import CONTINUOUS, FINAL

pytestmark = pytest.mark.slow

DECODE, PREFILL = 400.0, 5000.0
DECODE_TIME = "sparkfleet_demo:request_decode_time_seconds_sum"
STEPS = {
    "1/chunk": ("--tokens-per-chunk", "1"),
    "3/chunk": ("--tokens-per-chunk", "3", "--first-chunk-alone"),
    "accept 1-5": ("--accept-range", "1-5", "--first-chunk-alone"),
}


@pytest.mark.parametrize("role", ["role-chunk", "no-role-chunk"])
@pytest.mark.parametrize("usage", ["continuous", "final"])
@pytest.mark.parametrize("steps", sorted(STEPS))
def test_tg128_decode_within_one_percent(fake_lane, steps, usage, role):
    flags = [*STEPS[steps], "--usage", usage, "--decode-tps", str(DECODE), "--prefill-tps", str(PREFILL)]
    if role == "no-role-chunk":
        flags.append("--no-role-chunk")
    lane = fake_lane(*flags)
    endpoint = Endpoint(lane.url, "m")
    assert stream_chat(endpoint, chat_request(endpoint, "warm up", 2)).ok
    # the median of three runs, as a bench reports it: one stall on this shared 2-core box is noise
    runs, served = [], []
    for i in range(3):
        before = read_metrics(endpoint)[DECODE_TIME][0]
        runs.append(run_decode_probe(endpoint, DecodeProbe(487, 128), f"sf-shape-r{i}").metrics)
        served.append(127 / (read_metrics(endpoint)[DECODE_TIME][0] - before))  # tokens after the first
    assert all(m.ok for m in runs), [m.error for m in runs]
    ratios = sorted(m.decode_tps / s for m, s in zip(runs, served, strict=True))
    m = sorted(runs, key=lambda r: r.decode_tps)[1]
    assert m.token_source == (CONTINUOUS if usage == "continuous" else FINAL)
    assert m.completion_tokens == 128
    assert abs(ratios[1] - 1) < 0.01, ([r.decode_tps for r in runs], served, m.chunks)
    assert max(served) <= DECODE * 1.001  # sleep-paced: the server may serve late, never early
    # the first token leaves right after prefill: TTFT is prefill time (plus overhead, generous here)
    assert 487 / PREFILL - 0.001 <= min(r.ttft_s for r in runs) <= 487 / PREFILL + 0.050
    # TPOT and decode tok/s describe the same stream: they must agree (the old report contradicted itself)
    assert abs(1 / m.tpot_s - m.decode_tps) / m.decode_tps < 0.02
