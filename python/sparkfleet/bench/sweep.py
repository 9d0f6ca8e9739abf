"""The concurrency sweep: N requests in flight at once, for N in (1, 2, 4, 8, 16).

Each level sends a bounded number of requests (at least N, so every slot is used) from N worker
threads, each with its own unique prompt prefix. A level with any failed request is reported as
failed with its errors and no numbers: a mean over the survivors would flatter a broken server.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .client import Endpoint, chat_request, stream_chat
from .metrics import ITL_PER_CHUNK, Distribution, RequestMetrics, measure
from .prompts import make_prompt
from .tokens import TokenCounter


@dataclass(frozen=True)
class SweepSettings:
    levels: tuple[int, ...] = (1, 2, 4, 8, 16)
    requests_per_level: int = 16  # at least the level's concurrency is always sent
    prompt_tokens: int = 256
    max_tokens: int = 128


@dataclass(frozen=True)
class SweepLevel:
    """One concurrency level's results (numbers are None when any request failed)."""

    concurrency: int
    requests: int
    failed: int
    errors: tuple[str, ...]
    wall_s: float
    aggregate_tps: float | None  # completion tokens of all requests / wall time of the level
    per_request_tps: Distribution | None
    ttft_s: Distribution | None
    itl_s: Distribution | None
    tpot_s: Distribution | None
    token_sources: tuple[str, ...] = ()
    ttft_samples_s: tuple[float, ...] = ()  # for the report's TTFT distribution plot
    served_by: tuple[str | None, ...] = ()  # per request, the replica a gateway routed it to
    itl_basis: str | None = None  # "per token" when every request's chunks carried known counts

    @property
    def ok(self) -> bool:
        return self.failed == 0


def run_level(
    endpoint: Endpoint,
    concurrency: int,
    settings: SweepSettings,
    prefix: Callable[[], str],
    tokenizer: TokenCounter | None = None,
    on_done: Callable[[], None] | None = None,
) -> SweepLevel:
    count = max(settings.requests_per_level, concurrency)
    prompts = [make_prompt(settings.prompt_tokens, prefix(), tokenizer) for _ in range(count)]

    def one(prompt: str) -> RequestMetrics:
        body = chat_request(endpoint, prompt, settings.max_tokens, ignore_eos=True)
        metrics = measure(stream_chat(endpoint, body), tokenizer)
        if on_done:
            on_done()
        return metrics

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=f"sweep-c{concurrency}") as pool:
        results = list(pool.map(one, prompts))
    wall = time.perf_counter() - started
    failures = [r.error or "" for r in results if not r.ok]
    if failures:
        return SweepLevel(
            concurrency,
            count,
            len(failures),
            tuple(dict.fromkeys(failures))[:5],
            wall,
            None,
            None,
            None,
            None,
            None,
            served_by=_replicas(results),
        )
    total_tokens = sum(r.completion_tokens or 0 for r in results)
    return SweepLevel(
        concurrency=concurrency,
        requests=count,
        failed=0,
        errors=(),
        wall_s=wall,
        aggregate_tps=total_tokens / wall if wall > 0 else None,
        per_request_tps=Distribution.of([r.decode_tps for r in results if r.decode_tps is not None]),
        ttft_s=Distribution.of([r.ttft_s for r in results if r.ttft_s is not None]),
        itl_s=Distribution.of([gap for r in results for gap in r.itl_s]),  # mixed bases: per chunk
        tpot_s=Distribution.of([r.tpot_s for r in results if r.tpot_s is not None]),
        token_sources=tuple(sorted({r.token_source for r in results if r.token_source})),
        ttft_samples_s=tuple(r.ttft_s for r in results if r.ttft_s is not None),
        served_by=_replicas(results),
        itl_basis=bases.pop() if len(bases := {r.itl_basis for r in results}) == 1 else ITL_PER_CHUNK,
    )


def _replicas(results: list[RequestMetrics]) -> tuple[str | None, ...]:
    """Which replica served each request, in request order; () when no gateway said so."""
    seen = tuple(r.served_by for r in results)
    return seen if any(seen) else ()
