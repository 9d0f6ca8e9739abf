"""Speculative decoding's mean accept length, measured over *this* run.

Why not just read /get_server_info: SGLang's `avg_spec_accept_length` there (and any counter read
once) averages the server's whole life, so earlier traffic skews it (−29 % seen after a warm-up
with other prompts). Instead:

- vLLM has counters: `vllm:spec_decode_num_drafts_total` and
  `vllm:spec_decode_num_accepted_tokens_total`. Read before and after the run; the deltas give
  this run's mean tokens per verify step = 1 + Δaccepted / Δdrafts. Exact.
- SGLang has a gauge, `sglang:spec_accept_length`, one series per rank (tp_rank), each the mean of
  the last window of steps. Ranks are averaged (never summed: ×4 at TP4), and the gauge is sampled
  through the run once our own traffic has filled its window (`sglang:generation_tokens_total`
  advanced by WINDOW_TOKENS), then the samples are averaged.
- Only when /metrics has neither: /get_server_info's lifetime average, labelled as such.
- No speculative decoding (no metric, no drafts in this run, a gauge of 0): no figure at all.
"""

from __future__ import annotations

import http.client
import math
import re
import threading
from dataclasses import dataclass

from .client import Endpoint, get, get_json

VLLM_DRAFTS = "vllm:spec_decode_num_drafts_total"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
SGLANG_GAUGE = "sglang:spec_accept_length"
SGLANG_GENERATED = "sglang:generation_tokens_total"
# Our tokens before a gauge sample counts: SGLang's gauge is the mean over its last decode-log
# interval (40 forward steps by default), so after 40 steps of ≤5 tokens it holds only ours.
WINDOW_TOKENS = 200

SOURCE_VLLM = "vllm counters, this run"
SOURCE_SGLANG = "sglang gauge, sampled through this run"
SOURCE_LIFETIME = "/get_server_info lifetime average (fallback: includes traffic before this run)"


@dataclass(frozen=True)
class SpecAccept:
    value: float
    source: str
    samples: int = 0  # gauge samples averaged (SGLang), 0 for counters and the fallback


_PROM = re.compile(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+([-+0-9.eE]+|NaN|[+-]Inf)\s*$")


def parse_series(text: str) -> dict[str, list[float]]:
    """Metric name → the value of each of its label sets (NaN and infinities dropped)."""
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        match = _PROM.match(line.strip())
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        if math.isfinite(value):
            out.setdefault(match.group(1), []).append(value)
    return out


def parse_prometheus(text: str) -> dict[str, float]:
    """Metric name → value summed over label sets (right for counters, wrong for per-rank gauges)."""
    return {name: sum(values) for name, values in parse_series(text).items()}


def read_metrics(endpoint: Endpoint, timeout: float = 10.0) -> dict[str, list[float]] | None:
    try:
        status, body = get(endpoint, "/metrics", root=True, timeout=timeout)
    except (OSError, http.client.HTTPException):
        return None
    return parse_series(body.decode(errors="replace")) if status == 200 else None


def _find_accept(doc: object, depth: int = 0) -> float | None:
    if depth > 8:
        return None
    if isinstance(doc, dict):
        value = doc.get("avg_spec_accept_length")
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        for key in ("internal_states", "scheduler_info"):
            found = _find_accept(doc.get(key), depth + 1)
            if found is not None:
                return found
    if isinstance(doc, list):
        values = [v for v in (_find_accept(d, depth + 1) for d in doc[:64]) if v is not None]
        return sum(values) / len(values) if values else None
    return None


FINAL_SAMPLE_TIMEOUT_S = 15.0


class SpecSampler:
    """Start before the measured traffic, `stop()` after it: this run's accept length, or None."""

    def __init__(self, endpoint: Endpoint, interval_s: float = 0.5) -> None:
        self.endpoint = endpoint
        self.interval_s = interval_s
        self.before = read_metrics(endpoint) or {}
        self._generated0 = sum(self.before.get(SGLANG_GENERATED, [0.0]))
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spec-sampler", daemon=True)
        self._thread.start()

    def _sample(self, timeout_s: float | None = None) -> None:
        now = read_metrics(self.endpoint, timeout=timeout_s or max(self.interval_s * 4, 2.0))
        if not now or SGLANG_GAUGE not in now:
            return
        if sum(now.get(SGLANG_GENERATED, [0.0])) - self._generated0 < WINDOW_TOKENS:
            return  # the gauge's window still holds steps from before this run
        ranks = now[SGLANG_GAUGE]
        self.samples.append(sum(ranks) / len(ranks))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def close(self) -> None:
        """Stop sampling (also when the run ended early)."""
        self._stop.set()
        self._thread.join()

    def stop(self) -> SpecAccept | None:
        self.close()
        # the sample after the traffic may wait longer: nothing is timed then, and a lane still
        # busy (or a loaded machine) answering late must not cost the run its accept length
        self._sample(timeout_s=FINAL_SAMPLE_TIMEOUT_S)
        after = read_metrics(self.endpoint) or {}
        if VLLM_DRAFTS in after:
            drafts = sum(after[VLLM_DRAFTS]) - sum(self.before.get(VLLM_DRAFTS, [0.0]))
            accepted = sum(after.get(VLLM_ACCEPTED, [0.0])) - sum(self.before.get(VLLM_ACCEPTED, [0.0]))
            return SpecAccept(1.0 + accepted / drafts, SOURCE_VLLM) if drafts > 0 else None
        used = [s for s in self.samples if s > 0]
        if SGLANG_GAUGE in after and used:
            return SpecAccept(sum(used) / len(used), SOURCE_SGLANG, len(used))
        if SGLANG_GAUGE in after and max(after[SGLANG_GAUGE]) <= 0:
            return None  # the gauge is there and says no speculative decoding
        value = _find_accept(get_json(self.endpoint, "/get_server_info", root=True))
        return SpecAccept(value, SOURCE_LIFETIME) if value else None
