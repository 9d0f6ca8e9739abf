"""Measured decode tok/s and TTFT against a server whose true rates are known (sleep-paced).

The truth: decode 400 tok/s; prefill 5000 tok/s, so the 487-token probe's first token leaves after
97.4 ms plus (tokens in the first chunk - 1) / 400 s. With speculative decoding a chunk carries
several tokens; counting chunks would read a third of the truth at 3 tokens per chunk.
"""

from __future__ import annotations

import pytest

from sparkfleet.bench.client import Endpoint, chat_request, stream_chat
from sparkfleet.bench.metrics import measure
from sparkfleet.bench.probes import DecodeProbe, run_decode_probe
from sparkfleet.bench.tokens import CONTINUOUS, ESTIMATE, FINAL, TOKENIZER, LocalTokenizer

DECODE, PREFILL = 400.0, 5000.0
PROBE = DecodeProbe(prompt_tokens=487, max_tokens=400)


def _server(fake_lane, per_chunk: int, usage: str):
    return fake_lane(
        "--decode-tps",
        str(DECODE),
        "--prefill-tps",
        str(PREFILL),
        "--tokens-per-chunk",
        str(per_chunk),
        "--usage",
        usage,
    )


def _warm(endpoint: Endpoint) -> None:
    assert stream_chat(endpoint, chat_request(endpoint, "warm up", 2)).ok


@pytest.mark.serial  # a time bound (rates within 1 %, TTFT): make test runs it alone, after the parallel part
@pytest.mark.parametrize(
    ("per_chunk", "usage", "source"),
    [
        (1, "continuous", CONTINUOUS),
        (3, "continuous", CONTINUOUS),
        (3, "final", FINAL),
    ],
)
def test_decode_within_one_percent_and_ttft(fake_lane, per_chunk, usage, source):
    lane = _server(fake_lane, per_chunk, usage)
    endpoint = Endpoint(lane.url, "deepseek-v4.1-flash")
    _warm(endpoint)
    m = run_decode_probe(endpoint, PROBE, "sf-test-r0").metrics
    assert m.ok, m.error
    assert m.token_source == source
    assert m.completion_tokens == 400 and m.prompt_tokens == 487
    assert m.chunks == -(-400 // per_chunk)
    assert abs(m.decode_tps - DECODE) / DECODE < 0.01, m.decode_tps
    true_ttft = 487 / PREFILL + (per_chunk - 1) / DECODE
    assert true_ttft - 0.001 <= m.ttft_s <= true_ttft * 1.05 + 0.010, (m.ttft_s, true_ttft)
    assert abs(m.tpot_s - (m.latency_s - m.ttft_s) / 399) < 1e-9


@pytest.mark.serial  # a time bound (rates within 1 %, TTFT): make test runs it alone, after the parallel part
def test_local_tokenizer_counts_exactly_when_the_server_reports_no_usage(fake_lane, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from sparkfleet.demo.openai_server import VOCAB

    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(VOCAB)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.save(str(tmp_path / "tokenizer.json"))
    lane = _server(fake_lane, 3, "none")
    endpoint = Endpoint(lane.url, "m")
    _warm(endpoint)
    m = run_decode_probe(endpoint, PROBE, "sf-test-r1", LocalTokenizer(tmp_path)).metrics
    assert m.token_source == TOKENIZER and m.completion_tokens == 400
    assert abs(m.decode_tps - DECODE) / DECODE < 0.01, m.decode_tps


def test_without_usage_or_tokenizer_the_estimate_is_labelled(fake_lane):
    lane = _server(fake_lane, 3, "none")
    endpoint = Endpoint(lane.url, "m")
    m = measure(stream_chat(endpoint, chat_request(endpoint, "a short prompt", 30, ignore_eos=True)))
    assert m.ok and m.token_source == ESTIMATE


@pytest.mark.serial  # a time bound (rates within 1 %, TTFT): make test runs it alone, after the parallel part
def test_pp_rows_measure_prefill_with_unique_prefixes_and_a_cached_depth(fake_lane):
    lane = _server(fake_lane, 1, "continuous")
    endpoint = Endpoint(lane.url, "m")
    _warm(endpoint)
    counter = iter(range(1000))

    def prefix() -> str:
        return f"sf-test-r{next(counter)}"

    from sparkfleet.bench.probes import run_pp

    fresh = run_pp(endpoint, 1024, 0, 2, prefix)
    deep = run_pp(endpoint, 1024, 1024, 1, prefix)
    # unique prefixes: nothing is served from the (simulated) prefix cache, so this is real prefill;
    # request overhead can only make it read low (a cache hit would read high)
    assert fresh.error is None and 0.9 * PREFILL < fresh.tps_mean < 1.02 * PREFILL, fresh
    # at depth the context is cached first, so only the 1024 new tokens count, as in llama-bench
    assert deep.error is None and 0.9 * PREFILL < deep.tps_mean < 1.02 * PREFILL, deep


def test_spec_accept_length_sources():
    from sparkfleet.bench.spec_decode import _find_accept, parse_prometheus

    assert (
        _find_accept({"internal_states": [{"avg_spec_accept_length": 2.5}, {"avg_spec_accept_length": 3.5}]})
        == 3.0
    )
    assert _find_accept({"avg_spec_accept_length": 4}) == 4.0 and _find_accept({"version": "x"}) is None
    text = (
        "# HELP vllm:spec_decode_num_drafts_total drafts\n"
        'vllm:spec_decode_num_drafts_total{model_name="m"} 100.0\n'
        'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 250.0\n'
        "sglang:spec_accept_length NaN\n"
    )
    metrics = parse_prometheus(text)
    assert (
        metrics["vllm:spec_decode_num_drafts_total"] == 100.0 and "sglang:spec_accept_length" not in metrics
    )
