"""Decode tok/s within 1 % of truth on every way a real server streams speculative decoding.

Real servers send the prefill's token alone, then one chunk per verify step carrying 1 + accepted
draft tokens. Shapes: 1 token/chunk; 3/chunk; variable acceptance (1–5 per step, seeded); each with
continuous usage and with only a final usage record; each with and without a role-only opening
chunk. tg128 is the hard case: one token misplaced is 0.8 %.
"""

from __future__ import annotations

import pytest

from sparkfleet.bench.client import Endpoint, chat_request, stream_chat
from sparkfleet.bench.probes import DecodeProbe, run_decode_probe
from sparkfleet.bench.tokens import CONTINUOUS, FINAL

DECODE, PREFILL = 400.0, 5000.0
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
    m = run_decode_probe(endpoint, DecodeProbe(487, 128), "sf-shape-r0").metrics
    assert m.ok, m.error
    assert m.token_source == (CONTINUOUS if usage == "continuous" else FINAL)
    assert m.completion_tokens == 128
    assert abs(m.decode_tps - DECODE) / DECODE < 0.01, (m.decode_tps, m.chunks)
    # the first token leaves right after prefill: TTFT is prefill time (plus a little overhead)
    assert 487 / PREFILL - 0.001 <= m.ttft_s <= 487 / PREFILL * 1.05 + 0.010, m.ttft_s
    # TPOT and decode tok/s describe the same stream: they must agree (the old report contradicted itself)
    assert abs(1 / m.tpot_s - DECODE) / DECODE < 0.02
