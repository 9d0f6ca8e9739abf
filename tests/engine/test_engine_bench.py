"""sparkfleet's bench figures held to a real engine's own counters, request by request.

The engine is vLLM's CPU build (conftest.py) serving a tiny Qwen2 with n-gram speculative decoding.
Each test reads /metrics before and after its own requests (one at a time, nothing else runs on
the server), so every histogram's `_sum` delta belongs to exactly those requests.
"""

from __future__ import annotations

import itertools

import pytest

from sparkfleet.bench.client import chat_request, stream_chat
from sparkfleet.bench.metrics import measure
from sparkfleet.bench.probes import client_round_trip, run_pp
from sparkfleet.bench.prompts import make_prompt
from sparkfleet.bench.spec_decode import SOURCE_VLLM, SpecSampler

# an engine boot is minutes on 2 cores; under make test's xdist the modules using the session's
# `engine` share one worker, so it boots once
# serial: a real engine timed request by request on a 2-core machine; other workers' load skewed one
# request 18 % in a parallel run, so make test runs these (and test_engine_cli, sharing the engine) alone
pytestmark = [
    pytest.mark.slow, pytest.mark.timeout(1800), pytest.mark.xdist_group("vllm_engine"), pytest.mark.serial,
]

PREFIX = itertools.count()


def _prefix() -> str:
    return f"sf-engine-{next(PREFIX)}"


def delta(before: dict, after: dict, name: str) -> float:
    return sum(after.get(name, [0.0])) - sum(before.get(name, [0.0]))


def test_decode_rate_and_token_counts_match_the_engine(engine):
    """Decode within 1 % of the engine's request_decode_time; prompt and completion counts exact.

    Request by request. On this shared 2-core box (other engineers' jobs, load ~10) single
    requests read −5.5 % to +26 % off the engine's counter (+13.8 % even with nothing else on the
    machine), so the median of five requests must be within 1 % and each between −10 %
    and +30 %. Counts exact in every one. The deviation is not the client's
    clock: benchmarks/decode_deviation.py reads each chunk's kernel arrival stamp beside the
    client's read time (< 0.7 % apart), and the gap opens inside vLLM, between its API server
    handling a request's first output and writing its first chunk (up to 12.5 % of the decode;
    API server vs EngineCore stamps ≤ 2.9 %): late, never early, so single requests read high.
    """
    ep = engine.endpoint
    assert stream_chat(ep, chat_request(ep, "warm up", 4)).ok
    ratios = []
    for tokens in (256, 192, 256, 192, 256):
        before = engine.metrics()
        m = measure(stream_chat(ep, chat_request(ep, make_prompt(200, _prefix()), tokens, ignore_eos=True)))
        after = engine.metrics()
        assert m.ok, m.error
        assert delta(before, after, "vllm:request_success_total") == 1
        assert m.completion_tokens == tokens == delta(before, after, "vllm:request_generation_tokens_sum")
        assert m.prompt_tokens == delta(before, after, "vllm:request_prompt_tokens_sum")
        engine_tps = (tokens - 1) / delta(before, after, "vllm:request_decode_time_seconds_sum")
        ratios.append(m.decode_tps / engine_tps)
    assert abs(sorted(ratios)[2] - 1) <= 0.01 and all(0.90 <= r <= 1.30 for r in ratios), ratios


def test_prefilled_tokens_are_what_the_engine_computed(engine):
    """prompt − cached_tokens equals vLLM's request_prefill_kv_computed_tokens (16-token blocks)."""
    ep = engine.endpoint
    context = make_prompt(300, _prefix())
    seen_cached = []
    for new in ("", " " + make_prompt(40, _prefix()), " " + make_prompt(41, _prefix())):
        before = engine.metrics()
        m = measure(stream_chat(ep, chat_request(ep, context + new, 1)))
        after = engine.metrics()
        assert m.ok and m.cached_tokens is not None, m.error
        computed = delta(before, after, "vllm:request_prefill_kv_computed_tokens_sum")
        assert m.prompt_tokens - m.cached_tokens == computed, (m.prompt_tokens, m.cached_tokens, computed)
        seen_cached.append(m.cached_tokens)
    assert seen_cached[0] == 0 and all(c > 0 and c % 16 == 0 for c in seen_cached[1:]), seen_cached


def test_net_pp_never_reads_above_the_engines_own_prefill_rate(engine):
    """Issue 18 (1): pp net of the client round trip, held to request_prefill_time, run by run."""
    ep = engine.endpoint
    assert stream_chat(ep, chat_request(ep, "warm up", 2)).ok
    rtt = client_round_trip(ep)
    assert rtt is not None
    for pp in (512, 1024, 512):
        before = engine.metrics()
        row = run_pp(ep, pp, 0, 1, _prefix, rtt)
        after = engine.metrics()
        assert row.error is None and len(row.net_samples) == 1, row
        prefilled = delta(before, after, "vllm:request_prefill_kv_computed_tokens_sum")
        engine_tps = prefilled / delta(before, after, "vllm:request_prefill_time_seconds_sum")
        assert row.net_samples[0] <= engine_tps, (pp, row.net_samples[0], engine_tps, rtt)
        assert row.samples[0] <= row.net_samples[0]


def test_ngram_accept_length_is_the_engines(spec_engine):
    """The run's accept length from vLLM's spec-decode counters, exact, over its own window."""
    engine = spec_engine
    ep = engine.endpoint
    prompt = "Repeat after me: " + " ".join(["the fleet stages weights to every node"] * 12)
    before = engine.metrics()
    sampler = SpecSampler(ep, 0.5)
    for _ in range(2):
        assert measure(stream_chat(ep, chat_request(ep, prompt, 96, ignore_eos=True))).ok
    accept = sampler.stop()
    after = engine.metrics()
    drafts = delta(before, after, "vllm:spec_decode_num_drafts_total")
    accepted = delta(before, after, "vllm:spec_decode_num_accepted_tokens_total")
    assert drafts > 0, "n-gram speculative decoding proposed nothing"
    assert accept is not None and accept.source == SOURCE_VLLM
    assert accept.value == 1 + accepted / drafts
    assert accept.value > 1.0  # a random model repeats itself: the n-gram drafts get accepted
