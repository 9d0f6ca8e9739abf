"""A tiny local HTTP server whose every answer is a hostile one (for the supervisor and smoke tests).

Why not the demo server: these answers are not an engine misbehaving but a server lying about the
protocol (a `content` that is a number, 10^5 nested brackets, one byte a second, a body without
end); each is one small function here, and the test says which.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Answer = Callable[[BaseHTTPRequestHandler], None]


def completion(content: object) -> bytes:
    """A chat completion whose message content is `content` (any JSON value)."""
    message = {"role": "assistant", "content": content}
    choice = {"index": 0, "finish_reason": "stop", "message": message}
    return json.dumps({"id": "x", "object": "chat.completion", "model": "m", "choices": [choice]}).encode()


def body(data: bytes, ctype: str = "application/json") -> Answer:
    def answer(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    return answer


def trickle(data: bytes, every_s: float = 1.0) -> Answer:
    """`data` one byte every `every_s` (a socket read never waits long enough to time out)."""

    def answer(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        for b in data:
            h.wfile.write(bytes([b]))
            h.wfile.flush()
            time.sleep(every_s)

    return answer


def huge(size: int) -> Answer:
    """A JSON-looking body of `size` bytes (spaces, then nothing valid), written as fast as read."""

    def answer(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(size))
        h.end_headers()
        block, left = b" " * (1 << 20), size
        while left > 0:
            h.wfile.write(block[: min(left, len(block))])
            left -= len(block)

    return answer


def chatter(rate_bps: int = 1 << 20) -> Answer:
    """An SSE stream that never ends and never carries a token: comment lines at `rate_bps`.

    No content chunk, so no max_tokens guard can stop it; no pause, so a socket shut for reading
    keeps receiving (Linux hands over data that arrives after shutdown(SHUT_RD)).
    """

    def answer(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.end_headers()
        blob = b": keep-alive\n" * 4096
        while True:
            h.wfile.write(blob)
            h.wfile.flush()
            time.sleep(len(blob) / rate_bps)

    return answer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        body(json.dumps({"object": "list", "data": [{"id": "m"}]}).encode())(self)

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.close_connection = True
        with contextlib.suppress(OSError):  # the client hung up: what it should do
            self.server.answer(self)  # type: ignore[attr-defined]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass


@contextmanager
def hostile_server(answer: Answer) -> Iterator[str]:
    """Serve `answer` for every POST on 127.0.0.1; yields the base URL (…/v1)."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.answer = answer  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


