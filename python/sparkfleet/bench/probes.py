"""Single-request probes: smoke answers, the decode probe, the pp/tg table, the speculative accept length.

Each probe returns a record; a failed request is carried as its error (the report says "failed"
and why), never as a number.
"""

from __future__ import annotations

import dataclasses
import http.client
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .client import Endpoint, chat_request, get, stream_chat
from .metrics import RequestMetrics, ci95, measure
from .prompts import make_prompt
from .tokens import TokenCounter

# The user's own smoke checks: used when no recipe declares its own.
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


URL_BUDGET_HINT = "pass --max-tokens"
LANE_BUDGET_HINT = "raise smoke.max_tokens in the recipe or pass --max-tokens"


def cut_off_problem(max_tokens: int, answer: str, thought: str, budget_hint: str) -> str:
    """Why a reply that hit max_tokens failed, and what would change it.

    More room helps a reply that was still reasoning; a reply that answered and kept going may be a
    model that never stops (a base or draft model), which no budget fixes: it is benched without
    the smoke (--no-smoke).
    """
    head = f"cut off after {max_tokens} tokens (finish_reason 'length')"
    if not answer and thought:
        return f"{head} while still reasoning: give it more room ({budget_hint})"
    return (
        f"{head} without stopping: a model that never stops (a base or draft model) fails here "
        f"whatever the budget (bench it with --no-smoke); if the answer was only long, {budget_hint}"
    )


def run_smoke_case(endpoint: Endpoint, case: SmokeCase, budget_hint: str = URL_BUDGET_HINT) -> SmokeOutcome:
    """Ask one case and judge the *answer*: never the reasoning, and never a reply that was cut off.

    `budget_hint` is what the operator can change to give a cut-off reply more room: a --url run has
    no recipe (URL_BUDGET_HINT), a lane has one (LANE_BUDGET_HINT).
    """
    result = stream_chat(endpoint, chat_request(endpoint, case.prompt, case.max_tokens))
    if not result.ok:
        return SmokeOutcome(case.prompt, case.expect, False, None, result.finish_reason, None, result.error)
    answer = endpoint.secrets.safe(result.answer)
    latency = (result.chunks[-1].at if result.chunks else result.ended) - result.started
    problem = None
    if result.finish_reason == "length":
        thought = result.reasoning_text or (result.text if not answer else "")
        problem = cut_off_problem(case.max_tokens, answer, thought, budget_hint)
    elif not answer_matches(answer, case.expect):
        problem = f"expected {case.expect!r} in the answer"
        if not answer and result.reasoning_text:
            problem += " (the reply was all reasoning, no answer)"
    elif result.finish_reason != "stop":
        problem = f"finish_reason {result.finish_reason!r}, expected 'stop'"
    return SmokeOutcome(
        case.prompt, case.expect, problem is None, answer, result.finish_reason, latency, problem
    )


def smoke(
    endpoint: Endpoint,
    cases: Iterable[SmokeCase],
    budget_hint: str = URL_BUDGET_HINT,
    on_case: Callable[[SmokeOutcome], None] | None = None,
) -> list[SmokeOutcome]:
    """Ask every case in order, each judged alone: one wrong answer never skips the rest.

    The one smoke loop (`sparkfleet smoke`, the bench's smoke step and promote's smoke all run
    it). `on_case` sees each outcome as it lands, so a run interrupted mid-way keeps the answers
    it already has.
    """
    outcomes = []
    for case in cases:
        outcome = run_smoke_case(endpoint, case, budget_hint)
        outcomes.append(outcome)
        if on_case is not None:
            on_case(outcome)
    return outcomes


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
    prompt = make_prompt(probe.prompt_tokens, prefix, tokenizer)
    body = chat_request(endpoint, prompt, probe.max_tokens, ignore_eos=True)
    return DecodeProbeResult(probe, measure(stream_chat(endpoint, body), tokenizer))


@dataclass(frozen=True)
class TtftFigure:
    """The headline time to first token: the decode probe's prompt size, asked `runs` times (each
    prompt unique, max_tokens 1), with the 95 % CI of the mean like every other repeated figure."""

    mean: float | None
    ci95: float | None
    samples: tuple[float, ...]
    prompt_tokens: int | None
    error: str | None = None


def run_ttft(
    endpoint: Endpoint,
    prompt_tokens: int,
    runs: int,
    prefix: Callable[[], str],
    tokenizer: TokenCounter | None = None,
) -> TtftFigure:
    samples, prompt = [], None
    for _ in range(runs):
        m = measure(
            stream_chat(endpoint, chat_request(endpoint, make_prompt(prompt_tokens, prefix(), tokenizer), 1))
        )
        if not m.ok or m.ttft_s is None:
            return TtftFigure(None, None, tuple(samples), prompt, m.error or "no first token")
        samples.append(m.ttft_s)
        prompt = m.prompt_tokens
    return TtftFigure(sum(samples) / len(samples), ci95(samples), tuple(samples), prompt)


# -- pp/tg table (llama-bench style) --------------------------------------------------------------
PP_DEFINITION = """\
ppN @ dD: how fast the engine prefills N new prompt tokens when D tokens of context are already
in its KV cache (prefix cache). Each run sends a unique D-token context once (max_tokens 1) so the
server caches it, then that context + N unique new tokens; tok/s = tokens actually prefilled /
time to first token. Tokens prefilled = prompt − cached_tokens when the server reports
cached_tokens, else N (the context is assumed cached). Both figures are given: with the client's
own round trip (the fastest GET /v1/models, which runs no engine step) and without it. A figure
above what the engine's cold prefill rate (pp at d0, nothing cached) makes possible is not a
prefill rate: it is reported as unknown, with the reason."""
CEILING_SLACK = 1.10  # a deep prefill can read this far above the best cold one (noise), no further


@dataclass(frozen=True)
class TableRow:
    """One llama-bench row: `pp512 @ d4096` or `tg128 @ d0`, with tok/s over its runs.

    tps_* is tokens / TTFT as the client saw it; tps_net_* subtracts the client round trip
    (pp rows). `basis` says how prefilled tokens were counted; `unknown` says why a pp row has no
    figure although nothing failed.
    """

    test: str  # "pp512" | "tg128"
    depth: int
    runs: int
    tps_mean: float | None
    tps_std: float | None
    samples: tuple[float, ...]
    ttft_s_mean: float | None
    token_source: str | None
    error: str | None = None
    tps_ci95: float | None = None
    tps_net_mean: float | None = None
    tps_net_ci95: float | None = None
    net_samples: tuple[float, ...] = ()
    basis: str | None = None
    unknown: str | None = None


def _row(
    test: str,
    depth: int,
    samples: list[float],
    ttfts: list[float],
    source: str | None,
    error: str | None,
    net: list[float] | None = None,
    basis: str | None = None,
) -> TableRow:
    if error or not samples:
        return TableRow(test, depth, len(samples), None, None, (), None, source, error or "no samples")
    mean = sum(samples) / len(samples)
    std = (sum((s - mean) ** 2 for s in samples) / (len(samples) - 1)) ** 0.5 if len(samples) > 1 else 0.0
    ttft = sum(ttfts) / len(ttfts)
    net = net or []
    return TableRow(
        test,
        depth,
        len(samples),
        mean,
        std,
        tuple(samples),
        ttft,
        source,
        None,
        ci95(samples),
        sum(net) / len(net) if net and len(net) == len(samples) else None,
        ci95(net) if len(net) == len(samples) else None,
        tuple(net),
        basis,
    )


def client_round_trip(endpoint: Endpoint, tries: int = 9) -> float | None:
    """The fastest of `tries` `GET /v1/models`: what the client and HTTP cost by themselves.

    Why not a one-token chat request (as before): it pays a real forward step, and so does every
    prefill; subtracting it took part of the engine's own prefill time away and read pp up to 22 %
    above vLLM's own prefill rate. /v1/models runs no engine step. The fastest, not the
    median: noise only ever adds time. What the round trip leaves in (tokenizing, scheduling, the
    step) stays in the net figure, so it can read low, never high.
    """
    times = []
    for _ in range(tries):
        started = time.perf_counter()
        try:
            status, _body = get(endpoint, "/models")
        except (OSError, http.client.HTTPException):
            continue
        if status == 200:
            times.append(time.perf_counter() - started)
    return min(times) if times else None


def run_pp(
    endpoint: Endpoint,
    pp: int,
    depth: int,
    runs: int,
    prefix: Callable[[], str],
    rtt_s: float | None = None,
    tokenizer: TokenCounter | None = None,
) -> TableRow:
    """Prefill of `pp` new tokens after `depth` tokens of context in the KV cache (PP_DEFINITION)."""
    samples, net, ttfts, bases = [], [], [], set()
    for _ in range(runs):
        context = make_prompt(depth, prefix(), tokenizer) if depth else ""
        context_tokens = 0
        if depth:
            warm = measure(stream_chat(endpoint, chat_request(endpoint, context, 1)))
            if not warm.ok:
                return _row(f"pp{pp}", depth, [], [], None, f"context warmup failed: {warm.error}")
            context_tokens = warm.prompt_tokens or depth
        new = make_prompt(pp, prefix(), tokenizer)
        m = measure(stream_chat(endpoint, chat_request(endpoint, f"{context} {new}" if context else new, 1)))
        if not m.ok or not m.ttft_s:
            return _row(f"pp{pp}", depth, [], [], None, m.error or "no first token")
        prompt = m.prompt_tokens or (depth + pp)
        if m.cached_tokens is not None:
            prefilled, basis = prompt - m.cached_tokens, "cached_tokens reported"
        elif depth:
            prefilled = max(prompt - context_tokens, 1)
            basis = "cached_tokens not reported: context assumed cached"
        else:
            prefilled, basis = prompt, "cached_tokens not reported: unique prompt, nothing cached"
        bases.add(basis)
        samples.append(prefilled / m.ttft_s)
        if rtt_s is not None and m.ttft_s > rtt_s:
            net.append(prefilled / (m.ttft_s - rtt_s))
        ttfts.append(m.ttft_s)
    return _row(f"pp{pp}", depth, samples, ttfts, "server_usage", None, net, "; ".join(sorted(bases)))


def cold_prefill_rate(rows: list[TableRow]) -> float | None:
    """The fastest prefill the engine showed with nothing cached (the pp rows at depth 0)."""
    rates = [
        x for r in rows if r.test.startswith("pp") and r.depth == 0 for x in (r.net_samples or r.samples)
    ]
    return max(rates) if rates else None


def within_ceiling(row: TableRow, cold_tps: float | None) -> TableRow:
    """The row, or the row without figures when it claims more than the cold rate makes possible."""
    if not row.test.startswith("pp") or row.depth == 0 or row.tps_mean is None or cold_tps is None:
        return row
    claimed = row.tps_net_mean if row.tps_net_mean is not None else row.tps_mean
    if claimed <= cold_tps * CEILING_SLACK:
        return row
    why = (
        f"unknown: {claimed:.0f} tok/s would exceed the engine's cold prefill rate ({cold_tps:.0f} tok/s at "
        "d0): part of the prompt was served from the prefix cache without being reported"
    )
    if row.basis and "not reported" in row.basis:
        why += " (enable cache reporting: SGLang --enable-cache-report, vLLM --enable-prompt-tokens-details)"
    return dataclasses.replace(
        row, tps_mean=None, tps_std=None, samples=(), tps_ci95=None, tps_net_mean=None,
        tps_net_ci95=None, net_samples=(), unknown=why,
    )  # fmt: skip


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
        prompt = make_prompt(max(depth, 8), prefix(), tokenizer)
        m = measure(stream_chat(endpoint, chat_request(endpoint, prompt, tg, ignore_eos=True)), tokenizer)
        if not m.ok or m.decode_tps is None:
            return _row(f"tg{tg}", depth, [], [], m.token_source, m.error or "too few chunks to time decode")
        samples.append(m.decode_tps)
        ttfts.append(m.ttft_s or 0.0)
        source = m.token_source
    return _row(f"tg{tg}", depth, samples, ttfts, source, None)
