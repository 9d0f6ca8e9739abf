"""A streaming OpenAI-compatible client that times every chunk.

Why our own and not the `openai` package: the numbers are the product. We need the arrival time of
each SSE event taken as the bytes land, the usage records exactly as the server sent them, and a
stream that ends without `data: [DONE]` (or on an HTTP error) reported as a failure with a reason,
never folded into a number. The stdlib `http.client` gives all of that with no hidden retries.

The API key is sent as a header and never stored in a result.
"""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ..errors import SparkfleetError


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible base URL (ending in /v1) and how to talk to it."""

    base_url: str
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 600.0

    def __post_init__(self) -> None:
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SparkfleetError(
                f"not an http(s) URL: {self.base_url!r}", hint="e.g. http://127.0.0.1:30000/v1"
            )

    @property
    def server_root(self) -> str:
        """The server's root URL: /get_server_info and /metrics live beside /v1, not under it."""
        url = self.base_url.rstrip("/")
        return url[: -len("/v1")] if url.endswith("/v1") else url

    def with_model(self, model: str) -> Endpoint:
        return Endpoint(self.base_url, model, self.api_key, self.timeout)


@dataclass
class Chunk:
    """One SSE event that carried output text: when it arrived and what it said.

    Reasoning (`reasoning_content`, a thinking model's hidden text) is output too: it costs decode
    time and tokens, so it counts for TTFT and tok/s, but it is not the answer.
    """

    at: float  # time.perf_counter() when the event was parsed
    text: str
    usage_completion_tokens: int | None  # cumulative, when the server sends continuous usage
    reasoning: bool = False


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

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def text(self) -> str:
        """The answer: content only, without reasoning."""
        return "".join(c.text for c in self.chunks if not c.reasoning)

    @property
    def output_text(self) -> str:
        """Everything generated, reasoning included (what token estimates must count)."""
        thought = "".join(c.text for c in self.chunks if c.reasoning)
        return f"{thought}\n{self.text}" if thought else self.text

    @property
    def prompt_tokens(self) -> int | None:
        return int(self.usage["prompt_tokens"]) if self.usage and "prompt_tokens" in self.usage else None

    @property
    def cached_tokens(self) -> int | None:
        details = (self.usage or {}).get("prompt_tokens_details") or {}
        value = details.get("cached_tokens")
        return int(value) if value is not None else None


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
    return headers


def _error_text(body: bytes) -> str:
    try:
        doc = json.loads(body)
        error = doc.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        return str(message or doc)[:300]
    except (ValueError, AttributeError):
        return body.decode(errors="replace")[:300]


def get(endpoint: Endpoint, path: str, *, root: bool = False, timeout: float = 10.0) -> tuple[int, bytes]:
    """GET a path under the base URL (or under the server root); (status, body). Network errors raise."""
    base = endpoint.server_root if root else endpoint.base_url.rstrip("/")
    conn, full = _connection(base + path, timeout)
    try:
        conn.request("GET", full, headers=_headers(endpoint))
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def get_json(endpoint: Endpoint, path: str, *, root: bool = False) -> Any | None:
    """A JSON document, or None when the server does not have it (404, 5xx, not JSON, unreachable)."""
    try:
        status, body = get(endpoint, path, root=root)
    except (OSError, http.client.HTTPException):
        return None
    if status != 200:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def discover_model(endpoint: Endpoint) -> Endpoint:
    """Fill in the model from /v1/models when the caller did not name one."""
    if endpoint.model:
        return endpoint
    try:
        status, body = get(endpoint, "/models")
    except (OSError, http.client.HTTPException) as exc:
        raise SparkfleetError(
            f"cannot reach {endpoint.base_url}: {exc}", hint="is the lane up? try /health"
        ) from None
    if status != 200:
        raise SparkfleetError(
            f"{endpoint.base_url}/models answered HTTP {status}: {_error_text(body)}",
            hint="a 503 means the server is still booting; a 401 wants an API key",
        )
    try:
        models = [m["id"] for m in json.loads(body)["data"]]
    except (ValueError, KeyError, TypeError):
        raise SparkfleetError(f"{endpoint.base_url}/models: not an OpenAI model list") from None
    if not models:
        raise SparkfleetError(f"{endpoint.base_url}/models lists no model", hint="pass --model")
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


def stream_chat(endpoint: Endpoint, body: dict[str, Any]) -> StreamResult:
    """POST /chat/completions with stream=true and time every event. Never raises for server faults."""
    result = StreamResult(started=time.perf_counter())
    conn, path = _connection(endpoint.base_url.rstrip("/") + "/chat/completions", endpoint.timeout)
    try:
        payload = json.dumps(body).encode()
        headers = _headers(endpoint, {"Content-Type": "application/json", "Accept": "text/event-stream"})
        conn.request("POST", path, body=payload, headers=headers)
        resp = conn.getresponse()
        result.status = resp.status
        if resp.status != 200:
            result.error = f"HTTP {resp.status}: {_error_text(resp.read())}"
            return result
        _read_events(resp, result)
    except (OSError, http.client.HTTPException) as exc:  # timeouts are OSErrors
        result.error = f"stream broken after {len(result.chunks)} content chunks: {type(exc).__name__}: {exc}"
    finally:
        result.ended = time.perf_counter()
        conn.close()
    if result.error is None and not result.done_seen:
        result.error = f"stream ended without [DONE] after {len(result.chunks)} content chunks (dropped)"
    return result


def _read_events(resp: http.client.HTTPResponse, result: StreamResult) -> None:
    all_continuous = True
    while True:
        line = resp.readline()
        if not line:
            break
        now = time.perf_counter()
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            result.done_seen = True
            break
        try:
            event = json.loads(data)
        except ValueError:
            result.error = f"not JSON in stream: {data[:120]!r}"
            return
        if "error" in event:
            result.error = f"error event in stream: {_error_text(data)}"
            return
        usage = event.get("usage")
        if usage:
            result.usage = usage
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            content = delta.get("content") or choice.get("text") or ""
            thinking = delta.get("reasoning_content") or delta.get("reasoning") or ""
            if choice.get("finish_reason"):
                result.finish_reason = choice["finish_reason"]
            if content or thinking:
                cumulative = None
                if usage and usage.get("completion_tokens") is not None:
                    cumulative = int(usage["completion_tokens"])
                all_continuous = all_continuous and cumulative is not None
                result.chunks.append(
                    Chunk(
                        at=now,
                        text=thinking + content,
                        usage_completion_tokens=cumulative,
                        reasoning=not content,
                    )
                )
    result.continuous_usage = bool(result.chunks) and all_continuous
