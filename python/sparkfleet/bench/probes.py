"""Single-request probes: smoke answers, the decode probe, the pp/tg table, the speculative accept length.

Each probe returns a record; a failed request is carried as its error (the report says "failed"
and why), never as a number.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .client import Endpoint, chat_request, stream_chat
from .metrics import RequestMetrics, measure
from .prompts import make_prompt
from .tokens import TokenCounter

# The user's smoke checks (night shift 2026-09-27): used when no recipe declares its own.
DEFAULT_SMOKE = (
    ("What is 127*89? Answer with the number only.", "11303"),
    ("What is 19+23? Answer with the number only.", "42"),
)
_THINK = re.compile(r"<think>.*?</think>", re.S)
# Room for a reasoning model to think before it answers (DeepSeek-V4.1-Flash reasons first): a
# 64-token budget fails a correct answer that simply came after 100 tokens of thought.
DEFAULT_SMOKE_MAX_TOKENS = 2048


# -- smoke --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SmokeCase:
    """A prompt and the answer it must produce (as a whole word of the reply)."""

    prompt: str
    expect: str
    max_tokens: int = DEFAULT_SMOKE_MAX_TOKENS


@dataclass(frozen=True)
class SmokeOutcome:
    prompt: str
    expect: str
    passed: bool
    answer: str | None
    finish_reason: str | None
    latency_s: float | None
    problem: str | None  # why it did not pass


def answer_matches(answer: str, expect: str) -> bool:
    """The expected text appears as a whole word of the reply (a reasoning block is ignored)."""
    visible = _THINK.sub("", answer).strip()
    return re.search(rf"(?<![\w.]){re.escape(expect.strip())}(?![\w])", visible) is not None


def run_smoke_case(endpoint: Endpoint, case: SmokeCase) -> SmokeOutcome:
    """Ask one case and judge the *answer*: never the reasoning, and never a reply that was cut off."""
    result = stream_chat(endpoint, chat_request(endpoint, case.prompt, case.max_tokens))
    if not result.ok:
        return SmokeOutcome(case.prompt, case.expect, False, None, result.finish_reason, None, result.error)
    answer = endpoint.secrets.safe(result.answer)
    latency = (result.chunks[-1].at if result.chunks else result.ended) - result.started
    problem = None
    if result.finish_reason == "length":
        problem = (
            f"cut off after {case.max_tokens} tokens (finish_reason 'length'); "
            "raise smoke.max_tokens in the recipe or pass --max-tokens"
        )
    elif not answer_matches(answer, case.expect):
        problem = f"expected {case.expect!r} in the answer"
        if not answer and result.reasoning_text:
            problem += " (the reply was all reasoning, no answer)"
    elif result.finish_reason != "stop":
        problem = f"finish_reason {result.finish_reason!r}, expected 'stop'"
    return SmokeOutcome(
        case.prompt, case.expect, problem is None, answer, result.finish_reason, latency, problem
    )


# -- decode probe -------------------------------------------------------------------------------
@dataclass(frozen=True)
class DecodeProbe:
    """The user's decode probe: a fixed prompt of N tokens, max_tokens 400, temperature 0, streaming."""

    prompt_tokens: int = 487
    max_tokens: int = 400


@dataclass(frozen=True)
class DecodeProbeResult:
    probe: DecodeProbe
    metrics: RequestMetrics


def run_decode_probe(
    endpoint: Endpoint, probe: DecodeProbe, prefix: str, tokenizer: TokenCounter | None = None
) -> DecodeProbeResult:
    body = chat_request(endpoint, make_prompt(probe.prompt_tokens, prefix), probe.max_tokens, ignore_eos=True)
    return DecodeProbeResult(probe, measure(stream_chat(endpoint, body), tokenizer))


# -- pp/tg table (llama-bench style) --------------------------------------------------------------
@dataclass(frozen=True)
class TableRow:
    """One llama-bench row: `pp512 @ d4096` or `tg128 @ d0`, with tok/s over its runs."""

    test: str  # "pp512" | "tg128"
    depth: int
    runs: int
    tps_mean: float | None
    tps_std: float | None
    samples: tuple[float, ...]
    ttft_s_mean: float | None
    token_source: str | None
    error: str | None = None


def _row(
    test: str, depth: int, samples: list[float], ttfts: list[float], source: str | None, error: str | None
) -> TableRow:
    if error or not samples:
        return TableRow(test, depth, len(samples), None, None, (), None, source, error or "no samples")
    mean = sum(samples) / len(samples)
    std = (sum((s - mean) ** 2 for s in samples) / (len(samples) - 1)) ** 0.5 if len(samples) > 1 else 0.0
    ttft = sum(ttfts) / len(ttfts)
    return TableRow(test, depth, len(samples), mean, std, tuple(samples), ttft, source, None)


def run_pp(endpoint: Endpoint, pp: int, depth: int, runs: int, prefix: Callable[[], str]) -> TableRow:
    """Prefill of `pp` new tokens after `depth` tokens of context already in the KV cache.

    The context is sent once first (so a prefix-caching server holds it), then context + pp new words
    with max_tokens 1; tok/s = tokens actually prefilled (prompt − cached, per the server's usage) / TTFT.
    """
    samples, ttfts = [], []
    for _ in range(runs):
        context = make_prompt(depth, prefix()) if depth else ""
        if depth:
            warm = measure(stream_chat(endpoint, chat_request(endpoint, context, 1)))
            if not warm.ok:
                return _row(f"pp{pp}", depth, [], [], None, f"context warmup failed: {warm.error}")
        words = context.split() + make_prompt(pp, prefix()).split()
        m = measure(stream_chat(endpoint, chat_request(endpoint, " ".join(words), 1)))
        if not m.ok or not m.ttft_s:
            return _row(f"pp{pp}", depth, [], [], None, m.error or "no first token")
        prefilled = (m.prompt_tokens or len(words)) - (m.cached_tokens or 0)
        samples.append(prefilled / m.ttft_s)
        ttfts.append(m.ttft_s)
    return _row(f"pp{pp}", depth, samples, ttfts, "server_usage", None)


def run_tg(
    endpoint: Endpoint,
    tg: int,
    depth: int,
    runs: int,
    prefix: Callable[[], str],
    tokenizer: TokenCounter | None = None,
) -> TableRow:
    """Generation of `tg` tokens after `depth` tokens of (unique) context; tok/s = decode tok/s."""
    samples, ttfts, source = [], [], None
    for _ in range(runs):
        prompt = make_prompt(max(depth, 8), prefix())
        m = measure(stream_chat(endpoint, chat_request(endpoint, prompt, tg, ignore_eos=True)), tokenizer)
        if not m.ok or m.decode_tps is None:
            return _row(f"tg{tg}", depth, [], [], m.token_source, m.error or "too few chunks to time decode")
        samples.append(m.decode_tps)
        ttfts.append(m.ttft_s or 0.0)
        source = m.token_source
    return _row(f"tg{tg}", depth, samples, ttfts, source, None)
