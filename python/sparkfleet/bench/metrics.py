"""Per-request latency metrics and their distributions.

Definitions (the ones vLLM's and SGLang's benchmark scripts use, so numbers compare):
- TTFT: request sent → first non-empty content chunk.
- ITL: per token where the server says how many tokens each chunk carried (continuous usage): a
  gap before a chunk of k tokens counts as k gaps of gap/k (vLLM merges tokens into one chunk when the
  client lags, and its own inter_token_latency is per step, so per-chunk gaps read high); else
  gaps between consecutive content chunks, labelled per chunk (`itl_basis`).
- TPOT: (latency − TTFT) / (completion tokens − 1), latency = request sent → last content chunk.
- decode tok/s: tokens after the first chunk / (last chunk − first chunk), as vLLM's
  request_decode_time (first token to last) counts it; exact when a chunk carries several tokens,
  because the token counts come from `tokens.count_completion`.
A request that failed has `error` set and no numbers at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .client import StreamResult
from .tokens import TokenCount, TokenCounter, count_completion


@dataclass(frozen=True)
class RequestMetrics:
    """The numbers of one streamed request (all None when it failed)."""

    error: str | None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    token_source: str | None = None
    finish_reason: str | None = None
    ttft_s: float | None = None
    latency_s: float | None = None
    tpot_s: float | None = None
    decode_tps: float | None = None
    chunks: int = 0
    itl_s: tuple[float, ...] = field(default=(), repr=False)
    served_by: str | None = None  # the gateway's replica, when a gateway answered
    itl_basis: str | None = None  # ITL_PER_TOKEN | ITL_PER_CHUNK

    @property
    def ok(self) -> bool:
        return self.error is None


ITL_PER_TOKEN = "per token"
ITL_PER_CHUNK = "per chunk"


def measure(result: StreamResult, tokenizer: TokenCounter | None = None) -> RequestMetrics:
    """Turn a timed stream into metrics; a failed or empty stream yields only its error."""
    if not result.ok:
        return RequestMetrics(
            error=result.error, finish_reason=result.finish_reason, chunks=len(result.chunks),
            served_by=result.served_by,
        )  # fmt: skip
    count: TokenCount | None = count_completion(result, tokenizer)
    if count is None:
        return RequestMetrics(error="the stream completed but carried no content", chunks=0)
    first, last = result.chunks[0].at, result.chunks[-1].at
    ttft = first - result.started
    latency = last - result.started
    tpot = (latency - ttft) / (count.completion_tokens - 1) if count.completion_tokens > 1 else None
    after_first = count.completion_tokens - count.first_chunk_tokens
    decode = after_first / (last - first) if last > first and after_first > 0 else None
    gaps = tuple(b.at - a.at for a, b in zip(result.chunks, result.chunks[1:], strict=False))
    basis = ITL_PER_CHUNK
    if result.continuous_usage:  # every chunk's count is the server's own: ITL per token
        done = [c.usage_completion_tokens or 0 for c in result.chunks]
        steps = [b - a for a, b in zip(done, done[1:], strict=False)]
        if all(k >= 1 for k in steps):
            gaps = tuple(g / k for g, k in zip(gaps, steps, strict=True) for _ in range(int(k)))
            basis = ITL_PER_TOKEN
    return RequestMetrics(
        error=None,
        prompt_tokens=result.prompt_tokens,
        cached_tokens=result.cached_tokens,
        completion_tokens=count.completion_tokens,
        token_source=count.source,
        finish_reason=result.finish_reason,
        ttft_s=ttft,
        latency_s=latency,
        tpot_s=tpot,
        decode_tps=decode,
        chunks=len(result.chunks),
        itl_s=gaps,
        served_by=result.served_by,
        itl_basis=basis,
    )


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method), q in [0, 100]."""
    if not values:
        raise ValueError("percentile of nothing")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


# Two-sided 95 % Student t quantiles by degrees of freedom (1..30); 1.96 beyond.
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def ci95(values: list[float] | tuple[float, ...]) -> float | None:
    """Half-width of the 95 % confidence interval of the mean (Student t); None below 2 samples.

    Why t and not 1.96: benches repeat a figure 3-5 times, where the normal interval is far too
    narrow (t = 4.30 at n = 3).
    """
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    std = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    t = _T95[n - 2] if n - 1 <= len(_T95) else 1.96
    return t * std / n**0.5


@dataclass(frozen=True)
class Distribution:
    """p50/p90/p99 and mean of one metric over many samples."""

    n: int
    mean: float
    p50: float
    p90: float
    p99: float
    ci95: float | None = None  # of the mean

    @classmethod
    def of(cls, values: list[float]) -> Distribution | None:
        if not values:
            return None
        return cls(
            len(values),
            sum(values) / len(values),
            percentile(values, 50),
            percentile(values, 90),
            percentile(values, 99),
            ci95(values),
        )
