"""A small but real OpenAI-compatible HTTP server that behaves like an SGLang lane.

Why it exists: smoke, bench and launch must be tested against a real socket speaking the real
protocol (SSE streaming, usage records, /health during boot, /get_server_info, /metrics), with
timing whose truth is known, so a measured tok/s can be compared with the configured rate.

Conventions (documented because tests and benchmarks rely on them):
- A token is a word. Prompt tokens = whitespace-split words of the prompt (chat: of every message's
  content, joined). Output text is the token words joined by single spaces, so whitespace-splitting the
  text gives back the completion token count.
- Timing is paced by sleeping against an absolute schedule from the request's arrival:
  prefill takes `uncached prompt tokens / --prefill-tps`; output token i is ready at
  `prefill + i / --decode-tps`; a chunk carries `--tokens-per-chunk` tokens and leaves when its last
  token is ready (after the first chunk, counted from when the first chunk actually left). So decode
  tok/s measured between the first and last chunk, counting the tokens after the first chunk, equals
  --decode-tps exactly; TTFT = prefill + (tokens in first chunk - 1) / decode.
- A prompt holding an arithmetic expression "A*B", "A+B" or "A-B" (e.g. "What is 127*89? Answer with
  the number only.") is answered with the result (one token, finish_reason "stop"). A chat request
  that offers `tools` (a tool-calling harness's turn) is answered honestly and at once: NO_TOOLS, a
  short sentence saying no model stands behind this server, finish_reason "stop" (it never calls a
  tool, so such a harness scores it 0, in seconds rather than max_tokens of words per turn).
  Anything else gets a deterministic word stream of max_tokens tokens (default 64), finish_reason
  "length".
- --reasoning-tokens N starts every chat answer with N thinking words streamed as
  `reasoning_content` (SGLang's reasoning parser does this for DeepSeek); max_tokens counts them.
  For a sum the last thinking word is the right result; --wrong-answer then answers one less.
- Usage: --usage none never reports usage; final reports it in a last chunk when the request asks
  `stream_options.include_usage`; continuous also puts cumulative usage in every chunk when the request
  asks `stream_options.continuous_usage_stats` (as vLLM and SGLang do).
- --max-running N lets at most N requests decode at once; the rest queue and their wait shows up in
  TTFT, so a concurrency sweep saturates the way a real batch does.
- Prefix caching is simulated per 16-word block (--prefix-cache), so a benchmark that reuses prompt
  prefixes sees inflated prefill rates, as it would on SGLang.

Truth shapes (how real engines stream; each is a flag so the bench can be checked against all):
- --first-chunk-alone: the prefill's one token goes out alone, then decode steps of
  --tokens-per-chunk tokens (speculative decoding: one verify step emits several accepted tokens);
  --accept-range LO-HI draws each step's accepted tokens uniformly from LO..HI (seeded).
- --no-role-chunk: no role-only opening chunk (some servers put the role on the first token).
- --mixed-deltas: the chunk that ends the reasoning also starts the answer (vLLM does this);
  --think-in-content: no reasoning parser, the chat template already opened <think>, so the
  reasoning, "</think>" and the answer all arrive as `content`.
- --no-cache-report: usage carries no prompt_tokens_details (the default of SGLang and vLLM
  unless --enable-cache-report / --enable-prompt-tokens-details).
- --overhead-ms: fixed per-request cost before prefill (HTTP, tokenization, scheduling).
- Speculative metrics (when speculative decoding is on): --spec-metrics vllm exposes the
  counters vllm:spec_decode_num_drafts_total / num_accepted_tokens_total; sglang exposes the
  gauge sglang:spec_accept_length per tp_rank (--spec-ranks series, mean of the last 40 steps);
  /get_server_info carries the lifetime average, including --spec-history-drafts earlier steps
  at --spec-history-accept (traffic before this run).

Hostile answers (a stream that never ends, a body of the wrong shape, an echoed key...) are not
here: they are test fixtures (tests/support/hostile_server.py), which override the Handler's hooks
(`intercept`, `answer_get`, `model_id`, `error_detail`, `shape_answer`, `stream_override`).

Boot: the socket listens at once; /health answers 503 until --boot-delay has passed. Each --signature
line is printed (flushed) at an even fraction of the delay, then "The server is fired up and ready to
roll!" unless --omit-ready-line. --exit-during-boot exits with code 1 half-way.
--hang-generation-after N wedges the engine: generation requests after the first N never answer
while /health stays green (what `sparkfleet watch` must catch). The first stdout line
says where the server listens ("listening on http://HOST:PORT"), which matters when --port 0.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import json
import os
import random
import re
import signal
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

READY_LINE = "The server is fired up and ready to roll!"
PREFIX_BLOCK = 16  # words per simulated KV-cache block
SPEC_WINDOW = 40  # steps SGLang's spec_accept_length gauge averages over
DEFAULT_MAX_TOKENS = 64
NO_TOOLS = "This demo server has no model behind it: it cannot call tools."

# A whole expression, not digits inside a word (a benchmark nonce like "sf-1234abcd-r7" is no sum).
_ARITH = re.compile(r"(?<![\w-])(-?\d+)\s*([*×+\-])\s*(-?\d+)(?![\w-])")
VOCAB = (
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
    "spark",
    "fleet",
    "lane",
    "token",
)


@dataclass
class ServerConfig:
    """Everything the command line sets; read-only once serving."""

    host: str = "127.0.0.1"
    port: int = 30000
    served_model_name: str = "deepseek-v4.1-flash"
    boot_delay: float = 0.0
    signatures: list[str] = field(default_factory=list)
    omit_ready_line: bool = False
    exit_during_boot: bool = False
    prefill_tps: float = 2000.0
    decode_tps: float = 50.0
    tokens_per_chunk: int = 1
    usage: str = "final"  # none | final | continuous
    drop_after: int | None = None
    error_rate: float = 0.0
    fail_status: int = 500
    prefix_cache: bool = True
    api_key: str | None = None
    seed: int = 0
    max_running: int = 0  # 0 = every request decodes at once
    reasoning_tokens: int = 0  # chat answers start with this many thinking words (reasoning_content)
    wrong_answer: bool = False  # sums answered one too low (after reasoning that got them right)
    first_chunk_alone: bool = False
    accept_range: tuple[int, int] | None = None
    role_chunk: bool = True
    mixed_deltas: bool = False
    think_in_content: bool = False
    cache_report: bool = True
    overhead_ms: float = 0.0
    no_tokenize: bool = False  # no POST /tokenize (an engine that does not offer one)
    step_ms: float = 0.0  # a forward pass's fixed cost, prefill's included (a real engine's step)
    spec_metrics: str = "sglang"  # sglang | vllm | none (only /get_server_info's lifetime average)
    spec_ranks: int = 1
    spec_history_drafts: int = 0
    spec_history_accept: float = 0.0
    hang_generation_after: int | None = None  # a wedged engine: later generations never answer

    @property
    def speculative(self) -> bool:
        return self.tokens_per_chunk > 1 or self.accept_range is not None


@dataclass
class ServerState:
    """Mutable state shared by handler threads (guarded by `lock`)."""

    ready: bool = False
    requests_total: int = 0
    requests_failed: int = 0
    running: int = 0
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    cached_blocks: set[str] = field(default_factory=set)
    rng: random.Random = field(default_factory=random.Random)
    lock: threading.Lock = field(default_factory=threading.Lock)
    spec_drafts: int = 0  # decode steps taken (this server's lifetime)
    spec_accepted: int = 0  # tokens accepted beyond the one each step always yields
    spec_recent: list[int] = field(default_factory=list)  # tokens per step, last SPEC_WINDOW steps
    # The truth of decode as it happened (vLLM's request_decode_time: first token to last), from
    # this server's own writes: a sleep-paced schedule slips on a loaded machine, the writes do not lie.
    decode_time_sum: float = 0.0
    decode_time_count: int = 0


def prompt_words(body: dict[str, Any]) -> list[str]:
    """The prompt as words (tokens): chat messages' text contents joined, or the completions prompt."""
    if "messages" in body:
        parts: list[str] = []
        for message in body.get("messages") or []:
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
                parts.extend(p.get("text", "") for p in content if isinstance(p, dict))
        return " ".join(parts).split()
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        prompt = " ".join(str(p) for p in prompt)
    return str(prompt).split()


def last_user_text(body: dict[str, Any]) -> str:
    if "messages" in body:
        for message in reversed(body.get("messages") or []):
            if message.get("role") == "user" and isinstance(message.get("content"), str):
                return message["content"]
        return ""
    return str(body.get("prompt", ""))


def answer_tokens(
    body: dict[str, Any], words: list[str], reasoning: int = 0, wrong: bool = False
) -> tuple[list[str], str, int]:
    """(output tokens, finish_reason, how many of them are reasoning) for a request (deterministic).

    With `reasoning` > 0 the answer is preceded by that many thinking words (streamed as
    reasoning_content, as SGLang's reasoning parser does); max_tokens counts them too. For a sum
    the reasoning ends with the right result; `wrong` makes the final answer one less (a model that
    reasoned right and answered wrong: only the answer may be judged).
    """
    max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or DEFAULT_MAX_TOKENS)
    thinking = [f"think{i % 10}" for i in range(reasoning)]
    match = _ARITH.search(last_user_text(body))
    if body.get("tools") and "messages" in body:
        tokens, finish = thinking + NO_TOOLS.split(), "stop"
    elif match:
        a, op, b = int(match.group(1)), match.group(2), int(match.group(3))
        value = a + b if op == "+" else a - b if op == "-" else a * b
        if thinking:
            thinking[-1] = str(value)
        tokens, finish = thinking + [str(value - 1 if wrong else value)], "stop"
    else:
        digest = hashlib.sha256(" ".join(words).encode()).digest()
        start = int.from_bytes(digest[:4], "big")
        tokens = thinking + [VOCAB[(start + 7 * i) % len(VOCAB)] for i in range(max_tokens)]
        finish = "length"
    if len(tokens) > max_tokens:
        tokens, finish = tokens[:max_tokens], "length"
    return tokens, finish, min(reasoning, len(tokens))


def chunk_plan(n_tokens: int, per_chunk: int, split_at: int = 0) -> list[tuple[int, int]]:
    """[start, end) token ranges of each streamed chunk; no chunk crosses `split_at` (reasoning | answer)."""
    plan = [(i, min(i + per_chunk, split_at)) for i in range(0, split_at, per_chunk)]
    return plan + [(i, min(i + per_chunk, n_tokens)) for i in range(split_at, n_tokens, per_chunk)]


def spec_plan(
    n_tokens: int, steps: list[int], split_at: int = 0, crossing: bool = False
) -> list[tuple[int, int]]:
    """Speculative-decoding chunks: the prefill token alone, then one chunk per verify step.

    `steps` gives each step's token count (cycled). A step does not cross `split_at` (reasoning |
    answer) unless `crossing` (vLLM's mixed delta: one chunk ends the reasoning and starts the answer).
    """
    if n_tokens <= 0:
        return []
    plan, i, n = [(0, 1)], 1, 0
    while i < n_tokens:
        hi = min(i + steps[n % len(steps)], n_tokens)
        if not crossing and i < split_at < hi:
            hi = split_at
        plan.append((i, hi))
        i, n = hi, n + 1
    return plan


def render_prometheus(cfg: ServerConfig, state: ServerState) -> str:
    with state.lock:
        drafts, accepted, recent = state.spec_drafts, state.spec_accepted, list(state.spec_recent)
        decode_sum, decode_count = state.decode_time_sum, state.decode_time_count
        lines = [
            "# TYPE sglang:num_running_reqs gauge",
            f'sglang:num_running_reqs{{model_name="{cfg.served_model_name}"}} {state.running}',
            "# TYPE sglang:prompt_tokens_total counter",
            f'sglang:prompt_tokens_total{{model_name="{cfg.served_model_name}"}} {state.prompt_tokens_total}',
            "# TYPE sglang:generation_tokens_total counter",
            f'sglang:generation_tokens_total{{model_name="{cfg.served_model_name}"}} '
            f"{state.generation_tokens_total}",
        ]
    lines += [
        f"sparkfleet_demo:request_decode_time_seconds_sum {decode_sum!r}",
        f"sparkfleet_demo:request_decode_time_seconds_count {decode_count}",
    ]
    if cfg.speculative:  # the truth, for tests: steps and the tokens they yielded (no engine has these)
        lines += [
            f"sparkfleet_demo:spec_steps_total {drafts}",
            f"sparkfleet_demo:spec_step_tokens_total {drafts + accepted}",
        ]
    if cfg.speculative and cfg.spec_metrics == "sglang":
        window = sum(recent) / len(recent) if recent else cfg.spec_history_accept
        lines.append("# TYPE sglang:spec_accept_length gauge")
        lines += [
            f'sglang:spec_accept_length{{model_name="{cfg.served_model_name}",tp_rank="{r}"}} {window}'
            for r in range(cfg.spec_ranks)
        ]
    elif cfg.speculative and cfg.spec_metrics == "vllm":
        hist_accepted = round(cfg.spec_history_drafts * max(cfg.spec_history_accept - 1, 0))
        name = cfg.served_model_name
        lines += [
            "# TYPE vllm:spec_decode_num_drafts_total counter",
            f'vllm:spec_decode_num_drafts_total{{model_name="{name}"}} {drafts + cfg.spec_history_drafts}.0',
            "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
            f'vllm:spec_decode_num_accepted_tokens_total{{model_name="{name}"}} {accepted + hist_accepted}.0',
        ]
    return "\n".join(lines) + "\n"


def lifetime_accept_length(cfg: ServerConfig, state: ServerState) -> float | None:
    """What /get_server_info says: the average over the server's whole life (earlier traffic too)."""
    with state.lock:
        drafts = state.spec_drafts + cfg.spec_history_drafts
        tokens = state.spec_drafts + state.spec_accepted + cfg.spec_history_drafts * cfg.spec_history_accept
    return tokens / drafts if drafts else None


class Handler(BaseHTTPRequestHandler):
    """One HTTP request. Streams use chunked transfer encoding so a drop is visible to the client."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small SSE writes must leave at once, or timing lies
    server: FakeLaneServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # stdout belongs to the boot log the launcher reads; keep requests out of it

    # -- plumbing -------------------------------------------------------------------------------
    def _send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_text(self, status: int, text: str, ctype: str = "text/plain; version=0.0.4") -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        self._send_json(status, {"error": {"message": message, "type": kind, "code": status}})

    def _authorized(self) -> bool:
        key = self.server.cfg.api_key
        sent = self.headers.get("Authorization") or ""
        if key is None or hmac.compare_digest(sent.encode(), f"Bearer {key}".encode()):
            return True
        self._error(HTTPStatus.UNAUTHORIZED, f"invalid api key{self.error_detail()}", "authentication_error")
        return False

    def _booting(self) -> bool:
        if self.server.state.ready:
            return False
        self._error(HTTPStatus.SERVICE_UNAVAILABLE, "server is starting", "service_unavailable")
        return True

    # -- hooks: a test server overrides these to misbehave (tests/support/hostile_server.py) -------
    def intercept(self, path: str) -> bool:
        """Before boot and auth checks: True when the request was answered here (nothing in the demo)."""
        return False

    def answer_get(self, path: str) -> bool:
        """After auth, before the routes: True when a GET was answered here (nothing in the demo)."""
        return False

    def model_id(self) -> str:
        return self.server.cfg.served_model_name

    def error_detail(self) -> str:
        """Appended to error messages (nothing in the demo)."""
        return ""

    def shape_answer(self, tokens: list[str], thinking: int, usage: dict[str, Any]) -> None:
        """Change an answer's tokens or usage in place before it is sent (nothing in the demo)."""

    def stream_override(self, base: dict[str, Any]) -> bool:
        """After a stream's headers: True when the stream was written here (nothing in the demo)."""
        return False

    # -- GET ------------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        cfg, state = self.server.cfg, self.server.state
        path = self.path.split("?", 1)[0]
        if path in ("/health", "/health_generate"):
            if state.ready:
                self._send_json(HTTPStatus.OK, {"status": "ok"})
            else:
                self._error(HTTPStatus.SERVICE_UNAVAILABLE, "server is starting", "service_unavailable")
            return
        if self.intercept(path) or self._booting():
            return
        if path == "/metrics":  # without the key, as vLLM serves it (its key guards /v1 paths only)
            self._send_text(HTTPStatus.OK, render_prometheus(cfg, state))
            return
        if not self._authorized() or self.answer_get(path):
            return
        if path == "/v1/models":
            model = {
                "id": self.model_id(),
                "object": "model",
                "created": 0,
                "owned_by": "sparkfleet-demo",
            }
            self._send_json(HTTPStatus.OK, {"object": "list", "data": [model]})
        elif path == "/get_server_info":
            info: dict[str, Any] = {
                "served_model_name": cfg.served_model_name,
                "version": "sparkfleet-demo",
            }
            lifetime = lifetime_accept_length(cfg, state) if cfg.speculative else None
            if lifetime is not None:
                info["internal_states"] = [{"avg_spec_accept_length": lifetime}]
            self._send_json(HTTPStatus.OK, info)
        else:
            self._error(HTTPStatus.NOT_FOUND, f"no route {path}")

    # -- POST -----------------------------------------------------------------------------------
    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        arrived = time.perf_counter()
        path = self.path.split("?", 1)[0]
        length = (self.headers.get("Content-Length") or "0").strip()
        if not length.isdigit():  # `lots`, `-5`: int() would raise in the handler, read(-5) to EOF
            self.close_connection = True  # the body's end is unknown: this connection cannot go on
            self._error(HTTPStatus.BAD_REQUEST, f"Content-Length {length[:40]!r} is not a length")
            return
        raw = self.rfile.read(int(length)) if int(length) else b""
        if self.intercept(path) or self._booting() or not self._authorized():
            return
        if path == "/tokenize" and not self.server.cfg.no_tokenize:  # vLLM's shape: {"count", "tokens"}
            try:
                words = prompt_words(json.loads(raw or b"{}"))
            except (json.JSONDecodeError, AttributeError, TypeError):
                self._error(HTTPStatus.BAD_REQUEST, "body is not a tokenize request")
                return
            ids = [sum(map(ord, w)) % 1000 for w in words]
            self._send_json(HTTPStatus.OK, {"count": len(ids), "max_model_len": 1 << 20, "tokens": ids})
            return
        if path not in ("/v1/chat/completions", "/v1/completions"):
            self._error(HTTPStatus.NOT_FOUND, f"no route {path}")
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as exc:
            self._error(HTTPStatus.BAD_REQUEST, f"body is not JSON: {exc}")
            return
        cfg, state = self.server.cfg, self.server.state
        with state.lock:
            state.requests_total += 1
            fail = cfg.error_rate > 0 and state.rng.random() < cfg.error_rate
            if fail:
                state.requests_failed += 1
        if fail:
            if cfg.fail_status in (429, 503):
                message = f"injected failure (--error-rate): overloaded, retry later{self.error_detail()}"
                data = json.dumps({"error": {"message": message, "code": cfg.fail_status}}).encode()
                self.send_response(cfg.fail_status)
                self.send_header("Retry-After", "1")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            detail = self.error_detail()
            self._error(cfg.fail_status, f"injected failure (--error-rate){detail}", "server_error")
            return
        if cfg.hang_generation_after is not None and state.requests_total > cfg.hang_generation_after:
            threading.Event().wait()  # wedged: /health stays 200, this request never answers
        words = prompt_words(body)
        cached = self._cached_tokens(words)
        chat = path == "/v1/chat/completions"
        tokens, finish, thinking = answer_tokens(
            body, words, cfg.reasoning_tokens if chat else 0, cfg.wrong_answer
        )
        prefill_s = (len(words) - cached) / cfg.prefill_tps if cfg.prefill_tps > 0 else 0.0
        prefill_s += (cfg.overhead_ms + cfg.step_ms) / 1000
        usage: dict[str, Any] = {
            "prompt_tokens": len(words),
            "completion_tokens": len(tokens),
            "total_tokens": len(words) + len(tokens),
        }
        if cfg.cache_report:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        self.shape_answer(tokens, thinking, usage)
        slot = self.server.slots
        if slot is not None:
            slot.acquire()  # --max-running: queue like a full batch; the wait shows up in TTFT
            arrived = time.perf_counter()
        with state.lock:
            state.running += 1
            state.prompt_tokens_total += len(words)
        try:
            if body.get("stream"):
                self._stream(path, body, tokens, thinking, finish, usage, arrived + prefill_s)
            else:
                self._sleep_until(arrived + prefill_s + max(len(tokens) - 1, 0) / cfg.decode_tps)
                self._complete(path, tokens, thinking, finish, usage)
            with state.lock:
                state.generation_tokens_total += len(tokens)
        finally:
            with state.lock:
                state.running -= 1
            if slot is not None:
                slot.release()

    def _cached_tokens(self, words: list[str]) -> int:
        """Tokens of the longest block-aligned prefix seen before (and remember this prompt's blocks)."""
        if not self.server.cfg.prefix_cache:
            return 0
        hashes = []
        h = hashlib.sha256()
        for start in range(0, len(words) - len(words) % PREFIX_BLOCK, PREFIX_BLOCK):
            h.update(" ".join(words[start : start + PREFIX_BLOCK]).encode() + b"\n")
            hashes.append(h.copy().hexdigest())
        state = self.server.state
        with state.lock:
            hit = 0
            for digest in hashes:
                if digest not in state.cached_blocks:
                    break
                hit += 1
            state.cached_blocks.update(hashes)
        return min(hit * PREFIX_BLOCK, max(len(words) - 1, 0))

    @staticmethod
    def _sleep_until(deadline: float) -> None:
        delay = deadline - time.perf_counter()
        if delay > 0:
            time.sleep(delay)

    def _complete(
        self, path: str, tokens: list[str], thinking: int, finish: str, usage: dict[str, Any]
    ) -> None:
        cfg = self.server.cfg
        text = " ".join(tokens[thinking:])
        base = {
            "id": f"cmpl-{uuid.uuid4().hex[:16]}",
            "created": int(time.time()),
            "model": cfg.served_model_name,
        }
        if path == "/v1/chat/completions":
            message = {"role": "assistant", "content": text}
            if thinking:
                message["reasoning_content"] = " ".join(tokens[:thinking])
            choice = {"index": 0, "message": message, "finish_reason": finish}
            payload = {**base, "object": "chat.completion", "choices": [choice]}
        else:
            payload = {
                **base,
                "object": "text_completion",
                "choices": [{"index": 0, "text": text, "finish_reason": finish}],
            }
        if cfg.usage != "none":
            payload["usage"] = usage
        self._send_json(HTTPStatus.OK, payload)

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")

    def _event(self, payload: Any) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        self._write_chunk(f"data: {text}\n\n".encode())

    def _stream(
        self,
        path: str,
        body: dict[str, Any],
        tokens: list[str],
        thinking: int,
        finish: str,
        usage: dict[str, Any],
        first_token_at: float,
    ) -> None:
        cfg = self.server.cfg
        options = body.get("stream_options") or {}
        want_final = cfg.usage in ("final", "continuous") and bool(options.get("include_usage"))
        want_continuous = cfg.usage == "continuous" and bool(options.get("continuous_usage_stats"))
        chat = path == "/v1/chat/completions"
        base = {
            "id": f"cmpl-{uuid.uuid4().hex[:16]}",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": cfg.served_model_name,
        }
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if self.stream_override(base):
            return
        sent = 0
        in_content = cfg.think_in_content
        if in_content and thinking:  # the template opened <think>; the model closes it in content
            tokens = list(tokens)
            tokens[thinking - 1] += "</think>"

        def running_usage(done: int) -> dict[str, Any]:
            return {
                "prompt_tokens": usage["prompt_tokens"],
                "completion_tokens": done,
                "total_tokens": usage["prompt_tokens"] + done,
            }

        opening: dict[str, Any] | None = None
        if chat and cfg.role_chunk:  # OpenAI opens a chat stream with an empty role delta
            opening = {
                **base,
                "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                ],
            }
            if want_continuous:
                opening["usage"] = running_usage(0)
        split = 0 if in_content else thinking
        crossing = cfg.mixed_deltas and chat
        if cfg.accept_range is not None:
            lo, hi_ = cfg.accept_range
            with self.server.state.lock:
                rng = random.Random(self.server.state.rng.random())
            plan = spec_plan(
                len(tokens), [rng.randint(lo, hi_) for _ in range(max(len(tokens), 1))], split, crossing
            )
        elif cfg.first_chunk_alone:
            plan = spec_plan(len(tokens), [cfg.tokens_per_chunk], split, crossing)
        elif crossing:
            plan = chunk_plan(len(tokens), cfg.tokens_per_chunk)
        else:
            plan = chunk_plan(len(tokens), cfg.tokens_per_chunk, split)
        # Decode is paced from when the first chunk actually left: a late first chunk (a scheduler
        # hiccup on a busy machine) delays the stream instead of being followed by a catch-up burst.
        decode_origin: float | None = None
        first_hi = plan[0][1] if plan else 0
        for n, (lo, hi) in enumerate(plan):
            if cfg.drop_after is not None and sent >= cfg.drop_after:
                self._drop()
                return
            if decode_origin is None:
                self._sleep_until(first_token_at + (hi - 1) / cfg.decode_tps)
                if opening is not None:  # engines send it with the first token, not before prefill
                    self._event(opening)
                    sent += 1
                    if cfg.drop_after is not None and sent >= cfg.drop_after:
                        self._drop()
                        return
            else:
                self._sleep_until(decode_origin + (hi - first_hi) / cfg.decode_tps)
            last = n == len(plan) - 1
            reason = finish if last else None
            if chat:
                delta: dict[str, Any] = {}
                if not cfg.role_chunk and n == 0:
                    delta["role"] = "assistant"
                think_hi = min(hi, split)
                if lo < think_hi:  # reasoning part of this step
                    key = "reasoning" if crossing else "reasoning_content"
                    delta[key] = (" " if lo else "") + " ".join(tokens[lo:think_hi])
                if hi > split:
                    start = max(lo, split)
                    delta["content"] = (" " if start not in (0, split) else "") + " ".join(tokens[start:hi])
                choice = {"index": 0, "delta": delta, "finish_reason": reason}
            else:
                text = (" " if lo else "") + " ".join(tokens[lo:hi])
                choice = {"index": 0, "text": text, "finish_reason": reason}
            event = {**base, "choices": [choice]}
            if want_continuous:
                event["usage"] = running_usage(hi)
            self._event(event)
            sent += 1
            if decode_origin is None:
                decode_origin = time.perf_counter()
            elif cfg.speculative:
                self._count_step(hi - lo)
        if decode_origin is not None:  # the last content chunk has just been written
            self._count_decode(time.perf_counter() - decode_origin)
        if want_final:
            self._event({**base, "choices": [], "usage": usage})
        self._event("[DONE]")
        self._write_chunk(b"")  # chunked terminator

    def _count_decode(self, seconds: float) -> None:
        state = self.server.state
        with state.lock:
            state.decode_time_sum += seconds
            state.decode_time_count += 1

    def _count_step(self, tokens: int) -> None:
        """One speculative verify step that yielded `tokens` (1 + accepted draft tokens)."""
        state = self.server.state
        with state.lock:
            state.spec_drafts += 1
            state.spec_accepted += tokens - 1
            state.spec_recent.append(tokens)
            del state.spec_recent[:-SPEC_WINDOW]

    def _drop(self) -> None:
        """Close the connection mid-stream: no [DONE], no chunked terminator."""
        self.wfile.flush()
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


class FakeLaneServer(ThreadingHTTPServer):
    handler: type[Handler] = Handler  # a test server serves a Handler subclass
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default listen backlog is 5: a burst of 8+ connections (a concurrency sweep)
    # would see dropped SYNs and a 1 s retransmit in its TTFT.
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (after [DONE], or on purpose) is not an error worth a traceback:
        stderr may be a pipe nobody drains, and a full pipe would stall every handler thread."""
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)

    def __init__(self, cfg: ServerConfig) -> None:
        super().__init__((cfg.host, cfg.port), self.handler)
        self.cfg = cfg
        self.state = ServerState(rng=random.Random(cfg.seed))
        self.slots = threading.BoundedSemaphore(cfg.max_running) if cfg.max_running > 0 else None


def say(line: str) -> None:
    print(line, flush=True)


def fill_boot_caches() -> None:
    """Leave a compiled artifact in each boot cache the launch pointed us at, as an engine's JIT and
    autotuning do: the next boot of the same image x model x world then starts warm, truly."""
    try:  # the server also runs alone, with the stdlib only (a bare test image): then no cache to fill
        from ..base.atomic import write_bytes
        from ..lane.recipe import DEFAULT_BOOT_CACHE_ENV
    except ImportError:
        return
    for name in DEFAULT_BOOT_CACHE_ENV:
        d = os.environ.get(name)
        if d:
            with contextlib.suppress(OSError):
                Path(d).mkdir(parents=True, exist_ok=True)
                write_bytes(Path(d) / "demo-kernel.bin", b"autotuned by the demo server\n")


def boot(server: FakeLaneServer) -> None:
    """Print the boot signatures at even fractions of --boot-delay, then go ready (or die half-way)."""
    cfg = server.cfg
    start = time.monotonic()
    steps = len(cfg.signatures) + 1
    died_at = cfg.boot_delay / 2
    for i, line in enumerate(cfg.signatures):
        at = cfg.boot_delay * (i + 1) / steps
        if cfg.exit_during_boot and at >= died_at:
            break
        time.sleep(max(0.0, start + at - time.monotonic()))
        say(line)
    if cfg.exit_during_boot:
        time.sleep(max(0.0, start + died_at - time.monotonic()))
        print("RuntimeError: simulated crash during boot (--exit-during-boot)", file=sys.stderr, flush=True)
        say("Exiting: scheduler died during boot")
        os._exit(1)
    time.sleep(max(0.0, start + cfg.boot_delay - time.monotonic()))
    fill_boot_caches()
    server.state.ready = True
    if not cfg.omit_ready_line:
        say(READY_LINE)


def parse_args(argv: list[str] | None = None) -> ServerConfig:
    p = argparse.ArgumentParser(
        prog="python -m sparkfleet.demo.openai_server", description=__doc__.split("\n")[0]
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000, help="0 picks a free port (see the first stdout line)")
    p.add_argument("--served-model-name", default="deepseek-v4.1-flash")
    p.add_argument("--boot-delay", type=float, default=0.0, metavar="SECONDS")
    p.add_argument(
        "--signature", action="append", default=[], metavar="LINE", help="boot log line (repeatable)"
    )
    p.add_argument("--omit-ready-line", action="store_true")
    p.add_argument("--exit-during-boot", action="store_true")
    p.add_argument("--prefill-tps", type=float, default=2000.0)
    p.add_argument("--decode-tps", type=float, default=50.0)
    p.add_argument("--tokens-per-chunk", type=int, default=1)
    p.add_argument("--usage", choices=("none", "final", "continuous"), default="final")
    p.add_argument("--drop-after", type=int, default=None, metavar="N", help="close streams after N chunks")
    p.add_argument("--error-rate", type=float, default=0.0, help="fraction of generation requests that fail")
    p.add_argument("--fail-status", type=int, default=500)
    p.add_argument("--no-prefix-cache", action="store_true")
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' (shows in ps)")
    p.add_argument(
        "--api-key-env",
        default=None,
        metavar="NAME",
        help="require the key held in env variable NAME (a lane's: SPARKFLEET_API_KEY)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reasoning-tokens", type=int, default=0, help="thinking words before each chat answer")
    p.add_argument("--max-running", type=int, default=0, help="requests decoding at once; others queue")
    p.add_argument("--wrong-answer", action="store_true", help="answer sums one too low")
    p.add_argument("--first-chunk-alone", action="store_true", help="prefill token alone, then decode steps")
    p.add_argument("--accept-range", metavar="LO-HI", help="tokens per decode step drawn from LO..HI")
    p.add_argument("--no-role-chunk", action="store_true", help="no role-only opening chunk")
    p.add_argument("--mixed-deltas", action="store_true", help="one chunk ends reasoning, starts answer")
    p.add_argument("--think-in-content", action="store_true", help="no reasoning parser: </think> in content")
    p.add_argument("--no-cache-report", action="store_true", help="usage without prompt_tokens_details")
    p.add_argument("--overhead-ms", type=float, default=0.0, help="per-request cost before prefill")
    p.add_argument("--no-tokenize", action="store_true", help="no POST /tokenize endpoint")
    p.add_argument("--step-ms", type=float, default=0.0, help="fixed cost of the prefill's forward step")
    p.add_argument("--spec-metrics", choices=("sglang", "vllm", "none"), default="sglang")
    p.add_argument("--spec-ranks", type=int, default=1, help="tp_rank series of the SGLang gauge")
    p.add_argument("--spec-history-drafts", type=int, default=0, help="decode steps before this run")
    p.add_argument("--spec-history-accept", type=float, default=0.0, help="their mean accept length")
    p.add_argument(
        "--hang-generation-after",
        type=int,
        default=None,
        metavar="N",
        help="a wedged engine: generation requests after the first N hang; /health stays 200",
    )
    a = p.parse_args(argv)
    accept_range = None
    if a.accept_range:
        try:
            lo, hi = (int(x) for x in a.accept_range.split("-", 1))
        except ValueError:
            p.error("--accept-range wants LO-HI, e.g. 1-5")
        if not 1 <= lo <= hi:
            p.error("--accept-range wants 1 <= LO <= HI")
        accept_range = (lo, hi)
    api_key = a.api_key
    if a.api_key_env:  # as vLLM reads VLLM_API_KEY: the key never needs to be on the command line
        api_key = os.environ.get(a.api_key_env) or None
        if api_key is None:
            p.error(f"--api-key-env {a.api_key_env}: not set (refusing to serve without a key)")
    if a.tokens_per_chunk < 1 or a.decode_tps <= 0:
        p.error("--tokens-per-chunk must be >= 1 and --decode-tps > 0")
    return ServerConfig(
        host=a.host,
        port=a.port,
        served_model_name=a.served_model_name,
        boot_delay=a.boot_delay,
        signatures=a.signature,
        omit_ready_line=a.omit_ready_line,
        exit_during_boot=a.exit_during_boot,
        prefill_tps=a.prefill_tps,
        decode_tps=a.decode_tps,
        tokens_per_chunk=a.tokens_per_chunk,
        usage=a.usage,
        drop_after=a.drop_after,
        error_rate=a.error_rate,
        fail_status=a.fail_status,
        prefix_cache=not a.no_prefix_cache,
        api_key=api_key,
        seed=a.seed,
        max_running=a.max_running,
        reasoning_tokens=a.reasoning_tokens,
        wrong_answer=a.wrong_answer,
        first_chunk_alone=a.first_chunk_alone,
        accept_range=accept_range,
        role_chunk=not a.no_role_chunk,
        mixed_deltas=a.mixed_deltas,
        think_in_content=a.think_in_content,
        cache_report=not a.no_cache_report,
        overhead_ms=a.overhead_ms,
        step_ms=a.step_ms,
        no_tokenize=a.no_tokenize,
        spec_metrics=a.spec_metrics,
        spec_ranks=max(a.spec_ranks, 1),
        spec_history_drafts=a.spec_history_drafts,
        spec_history_accept=a.spec_history_accept,
        hang_generation_after=a.hang_generation_after,
    )


def _exit_cleanly(signum: int, frame: Any) -> None:
    """SIGTERM is how a runtime stops a lane: leave serve_forever and exit 0."""
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    return serve(FakeLaneServer(parse_args(argv)))


def serve(server: FakeLaneServer) -> int:
    """Say where it listens, boot, serve until SIGTERM."""
    cfg = server.cfg
    host, port = server.server_address[:2]
    say(f"sparkfleet demo openai_server: listening on http://{host}:{port} (model {cfg.served_model_name})")
    signal.signal(signal.SIGTERM, _exit_cleanly)
    if cfg.boot_delay <= 0 and not cfg.exit_during_boot:
        boot(server)  # ready before the first request can arrive: no 503 race at --boot-delay 0
    else:
        threading.Thread(target=boot, args=(server,), name="boot", daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.1)
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
