"""base/http.get_json against a real local server: what it returns for each kind of answer, and
that it never raises for what a server sends (its callers read a lane's or the router's state)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sparkfleet.base.http import MAX_ANSWER_BYTES, free_port, get_json

BODIES = {
    "/ok": (200, json.dumps({"data": [{"id": "m"}]}).encode()),
    "/empty": (200, b""),
    "/text": (200, b"not json"),
    "/deep": (200, b"[" * 100_000 + b"]" * 100_000),
    "/huge": (200, json.dumps({"pad": "x" * (MAX_ANSWER_BYTES + 10)}).encode()),
    "/refused": (401, b'{"error": "no key"}'),
}


class Handler(BaseHTTPRequestHandler):
    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        if self.path == "/auth":
            ok = self.headers.get("Authorization") == "Bearer sk-test"
            self._answer(200 if ok else 401, b'{"ok": true}' if ok else b"")
            return
        self._answer(*BODIES[self.path])

    def do_POST(self) -> None:  # noqa: N802
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        typed = self.headers.get("Content-Type") == "application/json"
        self._answer(200, json.dumps({"got": body.decode(), "json": typed}).encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def test_each_kind_of_answer(server: str):
    assert get_json(f"{server}/ok") == (200, {"data": [{"id": "m"}]})
    assert get_json(f"{server}/empty") == (200, None)
    assert get_json(f"{server}/text") == (200, None)
    assert get_json(f"{server}/deep") == (200, None)  # nested too deeply: not an exception
    assert get_json(f"{server}/huge") == (200, None)  # cut at the cap: read as not JSON
    assert get_json(f"{server}/refused") == (401, None)


def test_the_key_is_a_bearer_token_and_data_is_posted_as_json(server: str):
    assert get_json(f"{server}/auth") == (401, None)
    assert get_json(f"{server}/auth", key="sk-test") == (200, {"ok": True})
    assert get_json(f"{server}/post", data=b"{}") == (200, {"got": "{}", "json": True})


def test_nothing_listening_is_no_status():
    assert get_json(f"http://127.0.0.1:{free_port()}/health", timeout=2) == (None, None)
    assert get_json("not a url") == (None, None)


def test_free_port_is_bindable_on_v4_and_v6_loopback():
    import socket

    for address, family in (("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6)):
        try:
            port = free_port(address)
        except OSError:
            if family == socket.AF_INET6:
                pytest.skip("no IPv6 loopback here")
            raise
        with socket.socket(family) as s:
            s.bind((address, port))
