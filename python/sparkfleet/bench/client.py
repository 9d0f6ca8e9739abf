"""A streaming OpenAI-compatible client that times every chunk.

Why our own and not the `openai` package: the numbers are the product. We need the arrival time of
each SSE event taken as the bytes land, the usage records exactly as the server sent them, and a
stream that ends without `data: [DONE]` (or on an HTTP error) reported as a failure with a reason,
never folded into a number. The stdlib `http.client` gives all of that with no hidden retries.

The API key is sent as a header and never stored in a result.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ..base.errors import ExitCode, SparkfleetError
from ..base.sanitize import Secrets, clean, split_credentials

MAX_LINE_BYTES = 1 << 20  # one SSE line; a real event is a few hundred bytes
MAX_STREAM_BYTES = 64 << 20  # one streamed answer (a 32k-token answer is ~10 MB of events)
MAX_BODY_BYTES = 8 << 20  # a plain response: /v1/models, /get_server_info, /metrics, an error page
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
_decode = json.JSONDecoder().decode


# smg (the gateway, sparkfleet.serving.gateway) names the worker that served each request here
ROUTED_HEADER = "x-smg-routed-worker-id"


class ResponseTooLarge(http.client.HTTPException):
    """A body or line beyond our caps: we stop reading instead of growing without bound."""


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible base URL (ending in /v1) and how to talk to it.

    `timeout` is a whole-request deadline: connect, headers and every byte of the body must be done
    within it (a server trickling one byte a second does not get to stretch it). Credentials in the
    URL (`http://user:pass@host/v1`) are lifted out into an Authorization header and never kept in
    `base_url`.
    """

    base_url: str
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 600.0
    basic_auth: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SparkfleetError(
                f"not an http(s) URL: {clean(split_credentials(self.base_url).url)!r}",
                hint="e.g. http://127.0.0.1:30000/v1",
            )
        creds = split_credentials(self.base_url)
        if creds.url != self.base_url:
            object.__setattr__(self, "base_url", creds.url)
            object.__setattr__(self, "basic_auth", self.basic_auth or creds.basic_auth)

    @property
    def server_root(self) -> str:
        """The server's root URL: /get_server_info and /metrics live beside /v1, not under it."""
        url = self.base_url.rstrip("/")
        return url[: -len("/v1")] if url.endswith("/v1") else url

    @property
    def secrets(self) -> Secrets:
        """Values that must never be printed or stored, even when the server echoes them back."""
        values = [self.api_key or "", (self.basic_auth or " ").split(" ", 1)[1]]
        return Secrets(tuple(v for v in values if v))

    def with_model(self, model: str) -> Endpoint:
        return Endpoint(self.base_url, model, self.api_key, self.timeout, self.basic_auth)


@dataclass(slots=True)
class Chunk:
    """One SSE event that carried output text: when it arrived and what it said.

    Reasoning (`reasoning_content` / `reasoning`, a thinking model's hidden text) is output too: it
    costs decode time and tokens, so it counts for TTFT and tok/s, but it is not the answer. One
    event can carry both (vLLM ends the reasoning and starts the answer in the same delta), so they
    are kept apart per event.
    """

    at: float  # time.perf_counter() when the event's bytes arrived
    content: str
    usage_completion_tokens: int | None  # cumulative, when the server sends continuous usage
    reasoning: str = ""

    @property
    def text(self) -> str:
        return self.reasoning + self.content


@dataclass
class StreamResult:
    """Everything observed about one streamed request. `error` set means: no numbers from this."""

    started: float
    ended: float = 0.0
    status: int | None = None
    error: str | None = None
    chunks: list[Chunk] = field(default_factory=list)
    finish_reason: str | None = None
    done_seen: bool = False
    usage: dict[str, Any] | None = None  # the final usage record, if any
    continuous_usage: bool = False  # every content chunk carried cumulative usage
    served_by: str | None = None  # the replica a gateway routed this request to (ROUTED_HEADER)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def text(self) -> str:
        """Everything streamed as `content` (without parsed reasoning)."""
        return "".join(c.content for c in self.chunks)

    @property
    def reasoning_text(self) -> str:
        return "".join(c.reasoning for c in self.chunks)

    @property
    def answer(self) -> str:
        """The answer a human would read: content, minus any reasoning the server left in it.

        With no reasoning parser the model's `<think>…</think>` arrives as content; when the chat
        template already opened `<think>`, only the closing tag is streamed. Either way the answer
        is what follows the last `</think>`; an opened `<think>` never closed means the reply was
        still reasoning (no answer yet).
        """
        text = self.text
        if THINK_CLOSE in text:
            return text.rsplit(THINK_CLOSE, 1)[1].strip()
        if THINK_OPEN in text:
            return ""
        return text.strip()

    @property
    def output_text(self) -> str:
        """Everything generated, reasoning included (what token estimates must count)."""
        thought = self.reasoning_text
        return f"{thought}\n{self.text}" if thought else self.text

    @property
    def prompt_tokens(self) -> int | None:
        return int(self.usage["prompt_tokens"]) if self.usage and "prompt_tokens" in self.usage else None

    @property
    def cached_tokens(self) -> int | None:
        details = (self.usage or {}).get("prompt_tokens_details") or {}
        value = details.get("cached_tokens")
        return int(value) if value is not None else None


class _Watchdog:
    """Enforces a whole-request deadline by shutting the socket down when it passes.

    A per-read socket timeout cannot: a server that sends one byte every second never lets a read
    time out. Shutting the socket makes any blocked read return at once, whatever it was reading.
    """

    def __init__(self, conn: http.client.HTTPConnection, seconds: float) -> None:
        self.expired = False
        self._conn = conn
        self._timer = threading.Timer(max(seconds, 0.0), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.expired = True
        sock = self._conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self._timer.cancel()


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname, parts.port, timeout=timeout)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return conn, path


def _headers(endpoint: Endpoint, extra: dict[str, str] | None = None) -> dict[str, str]:
    headers = {"Accept": "application/json", **(extra or {})}
    if endpoint.api_key:
        headers["Authorization"] = f"Bearer {endpoint.api_key}"
    elif endpoint.basic_auth:
        headers["Authorization"] = endpoint.basic_auth
    return headers


def _error_text(body: bytes) -> str:
    try:
        doc = json.loads(body)
        error = doc.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        return clean(str(message or doc)[:300])
    except (ValueError, AttributeError, RecursionError):
        return clean(body.decode(errors="replace")[:300])


def _read_capped(resp: http.client.HTTPResponse, cap: int, watchdog: _Watchdog | None = None) -> bytes:
    """The body, at most `cap` bytes; stops at the deadline even while bytes keep coming.

    Why check the watchdog here too: on Linux a socket shut down for reading still hands over
    data that keeps arriving, so a server streaming without pause is not stopped by the shutdown.
    """
    parts, total = [], 0
    while True:
        data = resp.read1(65536)
        if not data or (watchdog is not None and watchdog.expired):
            return b"".join(parts)
        total += len(data)
        if total > cap:
            raise ResponseTooLarge(f"response body larger than {cap // (1 << 20)} MiB (stopped reading)")
        parts.append(data)


def get(
    endpoint: Endpoint, path: str, *, root: bool = False, timeout: float | None = None
) -> tuple[int, bytes]:
    """GET a path under the base URL (or the server root); (status, body). Network errors raise.

    The whole request must finish within `timeout` (default: the endpoint's) and the body stays
    under MAX_BODY_BYTES; otherwise OSError / ResponseTooLarge.
    """
    return request(endpoint, "GET", path, root=root, timeout=timeout)


def request(
    endpoint: Endpoint,
    method: str,
    path: str,
    payload: Any = None,
    *,
    root: bool = False,
    timeout: float | None = None,
    cap: int = MAX_BODY_BYTES,
) -> tuple[int, bytes]:
    """One plain (not streamed) request: `payload` sent as JSON; (status, body). Network errors raise.

    One total deadline (`timeout`, default the endpoint's) covers connect, headers and every byte
    of the body: a server trickling a byte a second gets no longer than that. The body stays
    under `cap` bytes (ResponseTooLarge), the deadline raises TimeoutError.
    """
    seconds = min(timeout, endpoint.timeout) if timeout is not None else endpoint.timeout
    base = endpoint.server_root if root else endpoint.base_url.rstrip("/")
    conn, full = _connection(base + path, seconds)
    watchdog = _Watchdog(conn, seconds)
    try:
        if payload is None:
            conn.request(method, full, headers=_headers(endpoint))
        else:
            extra = {"Content-Type": "application/json"}
            conn.request(method, full, body=json.dumps(payload).encode(), headers=_headers(endpoint, extra))
        resp = conn.getresponse()
        body = _read_capped(resp, cap, watchdog)
        if watchdog.expired:
            raise TimeoutError(f"no complete answer within {seconds:g} s")
        return resp.status, body
    except OSError as exc:
        if watchdog.expired or isinstance(exc, TimeoutError):  # the deadline, whichever saw it first
            raise TimeoutError(f"no complete answer within {seconds:g} s") from None
        raise
    finally:
        watchdog.cancel()
        conn.close()


def post_json(
    endpoint: Endpoint, path: str, payload: Any, *, root: bool = False, timeout: float = 10.0
) -> Any:
    """POST a JSON body to a path under the base URL (or the server root); the JSON answer, or None
    when there is none (not 200, not JSON, too big, unreachable, too slow)."""
    seconds = min(timeout, endpoint.timeout)
    base = endpoint.server_root if root else endpoint.base_url.rstrip("/")
    conn, full = _connection(base + path, seconds)
    watchdog = _Watchdog(conn, seconds)
    try:
        headers = _headers(endpoint, {"Content-Type": "application/json"})
        conn.request("POST", full, body=json.dumps(payload).encode(), headers=headers)
        resp = conn.getresponse()
        body = _read_capped(resp, MAX_BODY_BYTES)
        if watchdog.expired or resp.status != 200:
            return None
        return json.loads(body)
    except (OSError, http.client.HTTPException, ValueError, RecursionError):
        return None
    finally:
        watchdog.cancel()
        conn.close()


def get_json(endpoint: Endpoint, path: str, *, root: bool = False, timeout: float = 10.0) -> Any | None:
    """A JSON document, or None when the server does not have it (404, 5xx, not JSON, too big or too
    deeply nested, unreachable, too slow)."""
    try:
        status, body = get(endpoint, path, root=root, timeout=timeout)
    except (OSError, http.client.HTTPException):
        return None
    if status != 200:
        return None
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def discover_model(endpoint: Endpoint) -> Endpoint:
    """Fill in the model from /v1/models when the caller did not name one."""
    if endpoint.model:
        return endpoint
    safe = endpoint.secrets.safe
    try:
        status, body = get(endpoint, "/models")
    except (OSError, http.client.HTTPException) as exc:
        raise SparkfleetError(
            f"cannot read {endpoint.base_url}/models: {safe(str(exc))}",
            hint="is the lane up? try /health (or pass --model)",
            exit_code=ExitCode.UNREACHABLE,
        ) from None
    if status != 200:
        raise SparkfleetError(
            f"{endpoint.base_url}/models answered HTTP {status}: {safe(_error_text(body))}",
            hint="a 503 means the server is still booting; a 401 wants an API key; a 3xx is not followed",
            exit_code=ExitCode.SHORTFALL,
        )
    try:
        models = [m["id"] for m in json.loads(body)["data"]]
    except (ValueError, KeyError, TypeError, RecursionError):
        raise SparkfleetError(
            f"{endpoint.base_url}/models: not an OpenAI model list", exit_code=ExitCode.SHORTFALL
        ) from None
    models = [safe(m) for m in models if isinstance(m, str) and safe(m)]
    if not models:
        raise SparkfleetError(
            f"{endpoint.base_url}/models lists no model", hint="pass --model", exit_code=ExitCode.SHORTFALL
        )
    return endpoint.with_model(models[0])


def chat_request(
    endpoint: Endpoint, prompt: str, max_tokens: int, *, temperature: float = 0.0, ignore_eos: bool = False
) -> dict[str, Any]:
    """The body of a streamed chat completion asking for exact (continuous) usage."""
    body: dict[str, Any] = {
        "model": endpoint.model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if ignore_eos:
        body["ignore_eos"] = True  # vLLM/SGLang extension: generate exactly max_tokens
    return body


class _Malformed(Exception):
    """A stream event of the wrong shape (valid JSON, but not what the protocol says)."""


def _count(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Malformed(f"{what} is {type(value).__name__} {str(value)[:40]!r}, not a count")
    return value


def _text(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _Malformed(f"{what} is a {type(value).__name__}, not text")
    return value


def _check_usage(usage: Any) -> dict[str, Any]:
    if usage.__class__ is not dict:
        raise _Malformed(f"usage is a {type(usage).__name__}, not an object")
    for key in ("prompt_tokens", "completion_tokens"):
        value = usage.get(key)
        if value is not None and (value.__class__ is not int or value < 0):
            _count(value, f"usage.{key}")
    details = usage.get("prompt_tokens_details")
    if details is not None:
        if details.__class__ is not dict:
            raise _Malformed("usage.prompt_tokens_details is not an object")
        _count(details.get("cached_tokens"), "usage.prompt_tokens_details.cached_tokens")
    return usage


def stream_chat(endpoint: Endpoint, body: dict[str, Any]) -> StreamResult:
    """POST /chat/completions with stream=true and time every event. Never raises for server faults.

    Guards (each ends the request with one clear error and no numbers): the whole-request deadline
    (`endpoint.timeout`), a cap on one SSE line and on the whole stream, a stop well past
    `max_tokens` (a stream that does not end), events of the wrong shape, and usage the text
    received cannot support.
    """
    result = StreamResult(started=time.perf_counter())
    conn, path = _connection(endpoint.base_url.rstrip("/") + "/chat/completions", endpoint.timeout)
    watchdog = _Watchdog(conn, endpoint.timeout)
    max_tokens = body.get("max_tokens")
    try:
        payload = json.dumps(body).encode()
        headers = _headers(endpoint, {"Content-Type": "application/json", "Accept": "text/event-stream"})
        conn.request("POST", path, body=payload, headers=headers)
        if conn.sock is not None:
            # Blocking reads from here on: the watchdog enforces the deadline, and a socket with a
            # timeout costs a poll() before every recv() (the client's CPU per token is a goal).
            conn.sock.settimeout(None)
        resp = conn.getresponse()
        result.status = resp.status
        result.served_by = resp.getheader(ROUTED_HEADER)
        if resp.status != 200:
            result.error = f"HTTP {resp.status}: {_error_text(_read_capped(resp, MAX_BODY_BYTES, watchdog))}"
            if 300 <= resp.status < 400:
                result.error = f"HTTP {resp.status} redirect (not followed): point --url at the server itself"
        else:
            _read_events(resp, result, max_tokens if isinstance(max_tokens, int) else None, watchdog)
    except http.client.IncompleteRead:
        pass  # the connection closed mid-stream: reported below as "ended without [DONE]"
    except TimeoutError:
        watchdog.expired = True  # the socket's own timeout saw the deadline first
    except (OSError, http.client.HTTPException) as exc:
        if not watchdog.expired:
            result.error = (
                f"stream broken after {len(result.chunks)} content chunks: {type(exc).__name__}: {exc}"
            )
    finally:
        watchdog.cancel()
        result.ended = time.perf_counter()
        conn.close()
    if watchdog.expired and (result.error is None or not result.done_seen):
        result.error = (
            f"no complete answer within the {endpoint.timeout:g} s deadline (--timeout) after "
            f"{len(result.chunks)} content chunks"
        )
    if result.error is None and not result.done_seen:
        result.error = f"stream ended without [DONE] after {len(result.chunks)} content chunks (dropped)"
    if result.error is None:
        result.error = implausible_usage(result, max_tokens if isinstance(max_tokens, int) else None)
    if result.error is not None:
        result.error = endpoint.secrets.safe(result.error)
    return result


def usage_slack(max_tokens: int) -> int:
    """Tokens a usage count may exceed max_tokens by before it is implausible (an EOS, rounding)."""
    return 2 + max_tokens // 100


def implausible_usage(result: StreamResult, max_tokens: int | None) -> str | None:
    """Why the server's token counts cannot be true for what it streamed, or None when they can.

    Each streamed token is at least one byte of text (a special token at the end may be empty), a
    chunk that carried text carried at least one token, a server never generates past max_tokens,
    and it cannot have cached more prompt than it was sent.
    """
    counts = [c.usage_completion_tokens for c in result.chunks if c.usage_completion_tokens is not None]
    usage = result.usage or {}
    completion = usage.get("completion_tokens")
    if completion is None and counts:
        completion = counts[-1]
    if completion is not None:
        hidden = 0
        details = usage.get("completion_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("reasoning_tokens"), int):
            hidden = details["reasoning_tokens"] if not result.reasoning_text else 0
        text_bytes = len(result.output_text.encode())
        if max_tokens is not None and completion > max_tokens + usage_slack(max_tokens):
            return f"implausible usage: {completion} completion tokens claimed for max_tokens {max_tokens}"
        if completion - hidden > text_bytes + 8:
            return f"implausible usage: {completion} completion tokens claimed for {text_bytes} bytes of text"
        if completion + 2 + completion // 50 < len(result.chunks):  # reasoning→answer may split a step
            return (
                f"implausible usage: {completion} completion tokens for {len(result.chunks)} chunks of text"
            )
    prompt, cached = result.prompt_tokens, result.cached_tokens
    if prompt is not None and cached is not None and cached > prompt:
        return f"implausible usage: {cached} cached of {prompt} prompt tokens"
    return None


class _Dechunk:
    """HTTP/1.1 chunked transfer decoding, incremental.

    Why not http.client's: it makes ~20 Python calls per chunk, and every SSE event is its own
    chunk; decoding here keeps the client's CPU per token a small fraction of a decode step.
    """

    def __init__(self) -> None:
        self.unread = b""  # bytes received but not yet decoded (a chunk line cut in two)
        self.left = 0  # payload bytes still to come in the current chunk
        self.crlf = False  # the CRLF after a chunk's payload is still to come
        self.done = False  # the last (zero-size) chunk was seen

    def feed(self, data: bytes) -> bytes:
        raw, out = self.unread + data, []
        while raw and not self.done:
            if self.left:
                piece = raw[: self.left]
                out.append(piece)
                self.left -= len(piece)
                raw = raw[len(piece) :]
                self.crlf = self.left == 0
            elif self.crlf:
                if len(raw) < 2:
                    break
                raw, self.crlf = raw[2:], False
            else:
                end = raw.find(b"\r\n")
                if end < 0:
                    if len(raw) > 1024:
                        raise http.client.HTTPException("chunk size line longer than 1 KiB")
                    break
                try:
                    self.left = int(raw[:end].split(b";", 1)[0], 16)
                except ValueError:
                    raise http.client.HTTPException(f"bad chunk size {raw[:20]!r}") from None
                raw = raw[end + 2 :]
                self.done = self.left == 0
        self.unread = raw
        return b"".join(out)


def _read_events(
    resp: http.client.HTTPResponse, result: StreamResult, max_tokens: int | None, watchdog: _Watchdog
) -> None:
    """Split the body into SSE lines (capped) and fold each event into `result`, until the deadline
    (checked per read: a socket shut for reading still delivers bytes that keep arriving)."""
    all_continuous = True
    chunk_limit = None if max_tokens is None else 2 * max_tokens + 16
    usage_limit = None if max_tokens is None else max_tokens + usage_slack(max_tokens)
    pending, total = b"", 0
    fp = resp.fp
    dechunk = _Dechunk() if resp.chunked else None
    chunks = result.chunks
    while fp is not None:
        data = fp.read1(65536)
        if not data or watchdog.expired:
            break
        now = time.perf_counter()
        total += len(data)
        if total > MAX_STREAM_BYTES:
            result.error = f"stream larger than {MAX_STREAM_BYTES >> 20} MiB (stopped reading)"
            return
        if dechunk is not None:
            data = dechunk.feed(data)
        lines = (pending + data).split(b"\n")
        pending = lines.pop()
        if len(pending) > MAX_LINE_BYTES:
            result.error = f"an SSE line longer than {MAX_LINE_BYTES >> 20} MiB (stopped reading)"
            return
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                result.done_seen = True
                result.continuous_usage = bool(chunks) and all_continuous
                return
            try:
                all_continuous = _fold(_decode(payload.decode()), now, result) and all_continuous
            except (ValueError, RecursionError):
                result.error = f"not JSON in stream: {clean(payload[:120].decode(errors='replace'))!r}"
                return
            except _Malformed as exc:
                result.error = f"malformed stream event: {exc}"
                return
            if result.error:
                return
            if chunk_limit is not None and len(chunks) > chunk_limit:
                result.error = (
                    f"server kept streaming: {len(chunks)} chunks for max_tokens {max_tokens} "
                    "(stopped reading)"
                )
                return
            last = chunks[-1].usage_completion_tokens if chunks else None
            if usage_limit is not None and last is not None and last > usage_limit:
                result.error = (
                    f"implausible usage: {last} completion tokens so far for max_tokens {max_tokens}"
                )
                return
        if dechunk is not None and dechunk.done:
            break
    result.continuous_usage = bool(chunks) and all_continuous


def _fold(event: Any, now: float, result: StreamResult) -> bool:
    """Add one event to `result`; False when it carried text without cumulative usage.

    The common case (a dict with a list of dict choices, str deltas) takes the fast path; anything
    else goes through the checks that name what is wrong.
    """
    if event.__class__ is not dict:
        raise _Malformed(f"an event that is a JSON {type(event).__name__}, not an object")
    if "error" in event:
        result.error = f"error event in stream: {_error_text(json.dumps(event).encode())}"
        return True
    usage = event.get("usage")
    cumulative = None
    if usage is not None:
        result.usage = _check_usage(usage)
        cumulative = usage.get("completion_tokens")
    choices = event.get("choices")
    if choices is None:
        return True
    if choices.__class__ is not list:
        raise _Malformed(f"choices is a {type(choices).__name__}, not a list")
    continuous = True
    for choice in choices:
        if choice.__class__ is not dict:
            raise _Malformed(f"a choice is a {type(choice).__name__}, not an object")
        delta = choice.get("delta")
        if delta is None:
            delta = _EMPTY
        elif delta.__class__ is not dict:
            raise _Malformed(f"delta is a {type(delta).__name__}, not an object")
        content = delta.get("content")
        if content.__class__ is not str:
            content = _text(content, "delta.content") or _text(choice.get("text"), "text")
        thinking = delta.get("reasoning_content")
        if thinking.__class__ is not str:
            thinking = _text(thinking, "delta.reasoning_content") or _text(
                delta.get("reasoning"), "delta.reasoning"
            )
        reason = choice.get("finish_reason")
        if reason is not None:
            result.finish_reason = _text(reason, "finish_reason")[:40]
        if content or thinking:
            continuous = continuous and cumulative is not None
            result.chunks.append(Chunk(now, content, cumulative, thinking))
    return continuous


_EMPTY: dict[str, Any] = {}
