"""The demo OpenAI server with hostile answers, for the client's hardening tests (run as a script).

`python tests/support/hostile_server.py --hostile MODE [demo server flags]`: every flag of
`python -m sparkfleet.demo.openai_server`, plus the mode. These modes live here, not in the product
package, because only tests use them:

endless (tokens forever, no [DONE]), trickle (one byte of SSE at a time, forever), slow-models
(/v1/models never answers), huge-line (one SSE line of --hostile-bytes without a newline),
huge-body (/v1/models and /get_server_info bodies of --hostile-bytes), inflated-usage (usage
claims 64000 tokens), shape-list / shape-choices / shape-delta / shape-content / shape-usage
(valid JSON of the wrong shape), nested-info (/get_server_info nested 100000 deep), echo-key (the
Authorization header echoed in answers and errors), escapes (terminal escape sequences in answers
and the model id), redirect (every request answered 307 to another port).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from http import HTTPStatus
from typing import Any

from sparkfleet.demo.openai_server import FakeLaneServer, Handler, ServerConfig, parse_args, serve

HOSTILE_MODES = (
    "endless",
    "trickle",
    "slow-models",
    "huge-line",
    "huge-body",
    "inflated-usage",
    "shape-list",
    "shape-choices",
    "shape-delta",
    "shape-content",
    "shape-usage",
    "nested-info",
    "echo-key",
    "escapes",
    "redirect",
)
ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x1b[31m"


def nested_json(depth: int) -> bytes:
    """Valid JSON nested `depth` deep: json.loads of it overflows Python's recursion limit."""
    return b'{"internal_states":' + b"[" * depth + b"]" * depth + b"}"


class HostileHandler(Handler):
    """The demo Handler, misbehaving in the server's one `mode` through the Handler's hooks."""

    server: HostileServer

    @property
    def mode(self) -> str:
        return self.server.mode

    def intercept(self, path: str) -> bool:
        if self.mode != "redirect":
            return False
        self.send_response(HTTPStatus.TEMPORARY_REDIRECT)
        self.send_header("Location", f"http://127.0.0.1:1{self.path}")
        self.send_header("Content-Length", "0")
        self.end_headers()
        return True

    def answer_get(self, path: str) -> bool:
        if self.mode == "huge-body" and path in ("/v1/models", "/get_server_info"):
            self._huge_body()
            return True
        if self.mode == "slow-models" and path == "/v1/models":
            time.sleep(3600)
        if self.mode == "nested-info" and path == "/get_server_info":
            data = nested_json(100_000)
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return True
        return False

    def model_id(self) -> str:
        return super().model_id() + (ESCAPES if self.mode == "escapes" else "")

    def error_detail(self) -> str:
        """echo-key: repeat the caller's Authorization header back (as careless servers do)."""
        if self.mode != "echo-key":
            return ""
        return f" (you sent {self.headers.get('Authorization')!s})"

    def shape_answer(self, tokens: list[str], thinking: int, usage: dict[str, Any]) -> None:
        if self.mode in ("echo-key", "escapes") and thinking < len(tokens):
            extra = self.error_detail() if self.mode == "echo-key" else ESCAPES
            tokens[-1] += extra.replace(" ", "_")
        if self.mode == "inflated-usage":
            usage["completion_tokens"] = 64000

    def _huge_body(self) -> None:
        """A JSON-looking body of --hostile-bytes, written lazily (the client must stop reading)."""
        size = self.server.hostile_bytes
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        block = b" " * (1 << 20)
        with contextlib.suppress(OSError):
            left = size
            while left > 0:
                self.wfile.write(block[: min(left, len(block))])
                left -= len(block)

    def stream_override(self, base: dict[str, Any]) -> bool:
        """Stream misbehaviour; True when the mode took over the response."""
        mode = self.mode
        shapes: dict[str, Any] = {
            "shape-list": [1, 2, 3],
            "shape-choices": {**base, "choices": {"index": 0}},
            "shape-delta": {**base, "choices": [{"index": 0, "delta": "text"}]},
            "shape-content": {**base, "choices": [{"index": 0, "delta": {"content": {"x": 1}}}]},
            "shape-usage": {**base, "choices": [], "usage": "lots"},
        }
        try:
            if mode in shapes:
                self._event({**base, "choices": [{"index": 0, "delta": {"content": "ok"}}]})
                self._event(shapes[mode])
                self._event("[DONE]")
                self._write_chunk(b"")
            elif mode == "endless":
                n = 0
                while True:
                    self._event({**base, "choices": [{"index": 0, "delta": {"content": f" w{n}"}}]})
                    n += 1
                    if n % 50 == 0:
                        time.sleep(0.001)
            elif mode == "trickle":
                event = (
                    f"data: {json.dumps({**base, 'choices': [{'index': 0, 'delta': {'content': 'x'}}]})}\n\n"
                )
                while True:
                    for ch in event.encode():
                        self._write_chunk(bytes([ch]))
                        time.sleep(0.05)
            elif mode == "huge-line":
                self._write_chunk(b'data: {"choices": [{"delta": {"content": "')
                block = b"A" * (1 << 20)
                for _ in range(self.server.hostile_bytes // len(block)):
                    self._write_chunk(block)
            else:
                return False
        except OSError:
            pass  # the client hung up: that is what it should do
        return True


class HostileServer(FakeLaneServer):
    handler = HostileHandler

    def __init__(self, cfg: ServerConfig, mode: str, hostile_bytes: int) -> None:
        self.mode = mode
        self.hostile_bytes = hostile_bytes
        super().__init__(cfg)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="hostile_server.py", description=__doc__.split("\n")[0])
    p.add_argument("--hostile", choices=HOSTILE_MODES, required=True)
    p.add_argument("--hostile-bytes", type=int, default=512 * 1024 * 1024)
    own, rest = p.parse_known_args(argv)
    return serve(HostileServer(parse_args(rest), own.hostile, own.hostile_bytes))


if __name__ == "__main__":
    sys.exit(main())
