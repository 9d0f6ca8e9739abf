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
  the number only.") is answered with the result (one token, finish_reason "stop"). Anything else gets
  a deterministic word stream of max_tokens tokens (default 64), finish_reason "length".
- --reasoning-tokens N starts every chat answer with N thinking words streamed as
  `reasoning_content` (SGLang's reasoning parser does this for DeepSeek); max_tokens counts them.
- Usage: --usage none never reports usage; final reports it in a last chunk when the request asks
  `stream_options.include_usage`; continuous also puts cumulative usage in every chunk when the request
  asks `stream_options.continuous_usage_stats` (as vLLM and SGLang do).
- --max-running N lets at most N requests decode at once; the rest queue and their wait shows up in
  TTFT, so a concurrency sweep saturates the way a real batch does.
- Prefix caching is simulated per 16-word block (--prefix-cache), so a benchmark that reuses prompt
  prefixes sees inflated prefill rates, as it would on SGLang.

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
from typing import Any

READY_LINE = "The server is fired up and ready to roll!"
PREFIX_BLOCK = 16  # words per simulated KV-cache block
DEFAULT_MAX_TOKENS = 64

# A whole expression, not digits inside a word (a benchmark nonce like "sf-1234abcd-r7" is no sum).
_ARITH = re.compile(r"(?<![\w-])(-?\d+)\s*([*×+\-])\s*(-?\d+)(?![\w-])")
_VOCAB = (
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
    hang_generation_after: int | None = None  # a wedged engine: later generations never answer


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


def answer_tokens(body: dict[str, Any], words: list[str], reasoning: int = 0) -> tuple[list[str], str, int]:
    """(output tokens, finish_reason, how many of them are reasoning) for a request (deterministic).

    With `reasoning` > 0 the answer is preceded by that many thinking words (streamed as
    reasoning_content, as SGLang's reasoning parser does); max_tokens counts them too.
    """
    max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or DEFAULT_MAX_TOKENS)
    thinking = [f"think{i % 10}" for i in range(reasoning)]
    match = _ARITH.search(last_user_text(body))
    if match:
        a, op, b = int(match.group(1)), match.group(2), int(match.group(3))
        value = a + b if op == "+" else a - b if op == "-" else a * b
        tokens, finish = thinking + [str(value)], "stop"
    else:
        digest = hashlib.sha256(" ".join(words).encode()).digest()
        start = int.from_bytes(digest[:4], "big")
        tokens = thinking + [_VOCAB[(start + 7 * i) % len(_VOCAB)] for i in range(max_tokens)]
        finish = "length"
    if len(tokens) > max_tokens:
        tokens, finish = tokens[:max_tokens], "length"
    return tokens, finish, min(reasoning, len(tokens))


def chunk_plan(n_tokens: int, per_chunk: int, split_at: int = 0) -> list[tuple[int, int]]:
    """[start, end) token ranges of each streamed chunk; no chunk crosses `split_at` (reasoning | answer)."""
    plan = [(i, min(i + per_chunk, split_at)) for i in range(0, split_at, per_chunk)]
    return plan + [(i, min(i + per_chunk, n_tokens)) for i in range(split_at, n_tokens, per_chunk)]


def render_prometheus(cfg: ServerConfig, state: ServerState) -> str:
    with state.lock:
        lines = [
            "# TYPE sglang:num_running_reqs gauge",
            f'sglang:num_running_reqs{{model_name="{cfg.served_model_name}"}} {state.running}',
            "# TYPE sglang:prompt_tokens_total counter",
            f'sglang:prompt_tokens_total{{model_name="{cfg.served_model_name}"}} {state.prompt_tokens_total}',
            "# TYPE sglang:generation_tokens_total counter",
            f'sglang:generation_tokens_total{{model_name="{cfg.served_model_name}"}} '
            f"{state.generation_tokens_total}",
        ]
    if cfg.tokens_per_chunk > 1:
        accept = float(cfg.tokens_per_chunk)
        lines += [
            "# TYPE sglang:spec_accept_length gauge",
            f'sglang:spec_accept_length{{model_name="{cfg.served_model_name}"}} {accept}',
        ]
    return "\n".join(lines) + "\n"


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
        if key is None or self.headers.get("Authorization") == f"Bearer {key}":
            return True
        self._error(HTTPStatus.UNAUTHORIZED, "invalid api key", "authentication_error")
        return False

    def _booting(self) -> bool:
        if self.server.state.ready:
            return False
        self._error(HTTPStatus.SERVICE_UNAVAILABLE, "server is starting", "service_unavailable")
        return True

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
        if self._booting() or not self._authorized():
            return
        if path == "/v1/models":
            model = {
                "id": cfg.served_model_name,
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
            if cfg.tokens_per_chunk > 1:
                info["internal_states"] = [{"avg_spec_accept_length": float(cfg.tokens_per_chunk)}]
            self._send_json(HTTPStatus.OK, info)
        elif path == "/metrics":
            self._send_text(HTTPStatus.OK, render_prometheus(cfg, state))
        else:
            self._error(HTTPStatus.NOT_FOUND, f"no route {path}")

    # -- POST -----------------------------------------------------------------------------------
    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        arrived = time.perf_counter()
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self._booting() or not self._authorized():
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
            self._error(cfg.fail_status, "injected failure (--error-rate)", "server_error")
            return
        if cfg.hang_generation_after is not None and state.requests_total > cfg.hang_generation_after:
            threading.Event().wait()  # wedged: /health stays 200, this request never answers
        words = prompt_words(body)
        cached = self._cached_tokens(words)
        chat = path == "/v1/chat/completions"
        tokens, finish, thinking = answer_tokens(body, words, cfg.reasoning_tokens if chat else 0)
        prefill_s = (len(words) - cached) / cfg.prefill_tps if cfg.prefill_tps > 0 else 0.0
        usage = {
            "prompt_tokens": len(words),
            "completion_tokens": len(tokens),
            "total_tokens": len(words) + len(tokens),
            "prompt_tokens_details": {"cached_tokens": cached},
        }
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
        sent = 0

        def running_usage(done: int) -> dict[str, Any]:
            return {
                "prompt_tokens": usage["prompt_tokens"],
                "completion_tokens": done,
                "total_tokens": usage["prompt_tokens"] + done,
            }

        if chat:  # OpenAI opens a chat stream with an empty role delta
            opening = {
                **base,
                "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                ],
            }
            if want_continuous:
                opening["usage"] = running_usage(0)
            self._event(opening)
            sent += 1
        plan = chunk_plan(len(tokens), cfg.tokens_per_chunk, thinking)
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
            else:
                self._sleep_until(decode_origin + (hi - first_hi) / cfg.decode_tps)
            text = (" " if lo not in (0, thinking) else "") + " ".join(tokens[lo:hi])
            last = n == len(plan) - 1
            reason = finish if last else None
            if chat:
                key = "reasoning_content" if hi <= thinking else "content"
                choice = {"index": 0, "delta": {key: text}, "finish_reason": reason}
            else:
                choice = {"index": 0, "text": text, "finish_reason": reason}
            event = {**base, "choices": [choice]}
            if want_continuous:
                event["usage"] = running_usage(hi)
            self._event(event)
            sent += 1
            if decode_origin is None:
                decode_origin = time.perf_counter()
        if want_final:
            self._event({**base, "choices": [], "usage": usage})
        self._event("[DONE]")
        self._write_chunk(b"")  # chunked terminator

    def _drop(self) -> None:
        """Close the connection mid-stream: no [DONE], no chunked terminator."""
        self.wfile.flush()
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


class FakeLaneServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default listen backlog is 5: a burst of 8+ connections (a concurrency sweep)
    # would see dropped SYNs and a 1 s retransmit in its TTFT.
    request_queue_size = 128

    def __init__(self, cfg: ServerConfig) -> None:
        super().__init__((cfg.host, cfg.port), Handler)
        self.cfg = cfg
        self.state = ServerState(rng=random.Random(cfg.seed))
        self.slots = threading.BoundedSemaphore(cfg.max_running) if cfg.max_running > 0 else None


def say(line: str) -> None:
    print(line, flush=True)


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
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY'")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reasoning-tokens", type=int, default=0, help="thinking words before each chat answer")
    p.add_argument("--max-running", type=int, default=0, help="requests decoding at once; others queue")
    p.add_argument("--hang-generation-after", type=int, default=None, metavar="N",
                   help="a wedged engine: generation requests after the first N hang; /health stays 200")
    a = p.parse_args(argv)
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
        api_key=a.api_key,
        seed=a.seed,
        max_running=a.max_running,
        reasoning_tokens=a.reasoning_tokens,
        hang_generation_after=a.hang_generation_after,
    )


def _exit_cleanly(signum: int, frame: Any) -> None:
    """SIGTERM is how a runtime stops a lane: leave serve_forever and exit 0."""
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    server = FakeLaneServer(cfg)
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
