"""Estimators on streams of known truth, built chunk by chunk."""

from __future__ import annotations

import pytest

from sparkfleet.bench.client import Chunk, Endpoint, StreamResult, chat_request, stream_chat
from sparkfleet.bench.metrics import ITL_PER_CHUNK, ITL_PER_TOKEN, measure
from sparkfleet.bench.prompts import make_prompt
from sparkfleet.bench.spec_decode import read_metrics

RATE = 400.0


def _stream(steps: list[int], step_tokens: int = 1, continuous: bool = True) -> StreamResult:
    """The prefill's token alone at t=0.1 s, then one chunk per step of `steps[i]` tokens; every
    step takes `step_tokens` / RATE however many of its tokens were kept (a real engine's step)."""
    result = StreamResult(started=0.0, done_seen=True, finish_reason="length")
    done, at = 1, 0.1
    result.chunks.append(Chunk(at, "w ", 1 if continuous else None))
    for k in steps:
        done += k
        at += max(k, step_tokens) / RATE
        result.chunks.append(Chunk(at, "w " * k, done if continuous else None))
    result.usage = {"prompt_tokens": 10, "completion_tokens": done}
    result.continuous_usage = continuous
    return result


def test_tg128_in_steps_of_3_reads_exactly():
    """Issue 18 (6): step-quantised (the prefill token alone, then steps of 3) and short."""
    m = measure(_stream([3] * 42 + [1]))
    assert m.decode_tps == pytest.approx(RATE, rel=1e-9)


DECODE_TIME = "sparkfleet_demo:request_decode_time_seconds_sum"


@pytest.mark.serial  # measures rates/timing: make test runs it alone (it failed under parallel load)
@pytest.mark.parametrize("usage", ["continuous", "final"])
def test_tg128_in_steps_of_3_reads_the_servers_own_decode_time_request_by_request(fake_lane, usage):
    """Issue 18 (6): tg128 read 392.4 against a configured 400 tok/s (−1.9 %). The demo server is
    sleep-paced: on a loaded machine its last chunk leaves late (never early), so the configured
    rate is not what it served. Held to what it did (first written chunk to last, vLLM's
    request_decode_time, from the server's own clock), every request is within 1 %."""
    lane = fake_lane("--tokens-per-chunk", "3", "--first-chunk-alone", "--usage", usage,
                     "--decode-tps", str(RATE), "--prefill-tps", "20000")  # fmt: skip
    ep = Endpoint(lane.url, "deepseek-v4.1-flash")
    assert stream_chat(ep, chat_request(ep, "warm up", 4)).ok
    ratios = []
    for i in range(5):
        before = read_metrics(ep)[DECODE_TIME][0]
        result = stream_chat(
            ep, chat_request(ep, make_prompt(487, f"tg128-{usage}-{i}"), 128, ignore_eos=True)
        )
        served = read_metrics(ep)[DECODE_TIME][0] - before
        m = measure(result)
        assert m.ok and m.completion_tokens == 128 and len(result.chunks) == 1 + 43, m.error
        ratios.append(m.decode_tps / (127 / served))
    assert all(abs(r - 1) <= 0.01 for r in ratios), ratios


def test_itl_is_per_token_where_chunk_counts_are_known_else_labelled_per_chunk():
    """vLLM merges tokens into one chunk when the client lags: per-chunk gaps read high."""
    m = measure(_stream([1, 1, 3, 1, 2, 1]))
    assert m.itl_basis == ITL_PER_TOKEN and len(m.itl_s) == 9
    assert all(gap == pytest.approx(1 / RATE) for gap in m.itl_s)
    chunked = measure(_stream([1, 1, 3, 1, 2, 1], continuous=False))
    assert chunked.itl_basis == ITL_PER_CHUNK and len(chunked.itl_s) == 6
