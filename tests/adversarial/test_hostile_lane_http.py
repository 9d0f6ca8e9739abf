"""Every path the demo lane serves, asked without its key, with another key, or with a broken request.

The demo lane (`sparkfleet.demo.openai_server`, what `sparkfleet demo` launches) is the package's
own OpenAI server; its routes come from its code (surfaces.http_servers), so a route added there is
attacked here without anyone listing it. The oracle, from what a lane promises (SECURITY.md: every
lane serves only with its key), not from the server's code:

* without the key, or with another, every path but the open ones is refused with 401, and the
  answer carries nothing of the lane's (no model id, no tokens);
* the open paths are the health checks (they say "ok", nothing else) and `/metrics`, keyless as
  vLLM's and SGLang's are, because Prometheus scrapes the engines without the lane's key
  (SECURITY.md): it answers counters and nothing else (no key, no prompt text);
* a request whose body is not JSON, or whose Content-Length is not a length, is refused with a
  4xx answer, not a dropped connection (a traceback in the lane's log);
* after each, the lane still answers a good request: one bad client does not take it down.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading

import pytest

from sparkfleet.demo.openai_server import FakeLaneServer, ServerConfig, boot

from .surfaces import http_servers
from .tally import bad_input

KEY = "sk-sparkfleet-lane-" + "k" * 32
MODEL = "sf-hostile-demo-model"
HEALTH = {"/health", "/health_generate"}  # what a lane answers to anyone: its liveness, nothing else
METRICS = "/metrics"  # and its counters, for Prometheus (keyless, as the engines' own)
OPEN = HEALTH | {METRICS}
ROUTES = http_servers()["demo-lane"]


@pytest.fixture(scope="module")
def lane():
    server = FakeLaneServer(ServerConfig(host="127.0.0.1", port=0, api_key=KEY, served_model_name=MODEL))
    boot(server)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def ask(port: int, method: str, path: str, key: str | None, body: bytes | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    if body is None and method == "POST":
        body = json.dumps({"model": MODEL, "prompt": "What is 2+2?", "max_tokens": 2}).encode()
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def raw(port: int, request: bytes) -> bytes:
    """Send bytes as they are (a header no client library would write); the answer, or b'' if dropped."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def still_serving(port: int) -> bool:
    status, body = ask(port, "GET", "/v1/models", KEY)
    return status == 200 and MODEL.encode() in body


def _routes(kind: str):
    return [
        pytest.param(m, p, id=f"{m} {p}", marks=pytest.mark.surface(f"http:demo-lane {m} {p}"))
        for m, p in ROUTES
        if kind == "all" or (kind == "post" and m == "POST") or (kind == "keyed" and p not in OPEN)
    ]


@pytest.mark.parametrize("key", [None, "sk-not-the-lane-key", "", f"{KEY}x", KEY[:-1]])
@pytest.mark.parametrize("method,path", _routes("keyed"))
def test_without_the_lanes_key_every_path_is_refused(lane, figures, method, path, key):
    status, body = ask(lane, method, path, key)
    refused = status == 401 and MODEL.encode() not in body
    bad_input(figures, "demo-lane-http", refused=refused)
    assert refused, (status, body[:300])
    assert still_serving(lane)


@pytest.mark.parametrize("method,path", [p for p in _routes("all") if p.values[1] in HEALTH])
def test_a_health_check_tells_anyone_only_that_the_lane_is_up(lane, method, path):
    status, body = ask(lane, method, path, None)
    assert status == 200 and json.loads(body) == {"status": "ok"}


# One Prometheus sample: `name{label="value",...} number` (the exposition format's line, no timestamp).
SAMPLE = re.compile(
    r"[a-zA-Z_:][a-zA-Z0-9_:]*"  # the metric's name
    + r'(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*",?)*\})?'  # its labels
    + r" (-?[0-9.]+(e[+-]?[0-9]+)?|NaN|[+-]Inf)"  # its value
)


@pytest.mark.parametrize("key", [None, "sk-not-the-lane-key"])
@pytest.mark.parametrize("method,path", [p for p in _routes("all") if p.values[1] == METRICS])
def test_metrics_tell_anyone_counters_and_nothing_else(lane, method, path, key):
    """A keyed request with a prompt the test made up goes first: /metrics, asked without the key,
    must show counts of it but neither its text nor the key."""
    marker = "sf-prompt-marker-" + "q" * 12
    body = json.dumps({"model": MODEL, "prompt": f"{marker} What is 2+2?", "max_tokens": 2}).encode()
    assert ask(lane, "POST", "/v1/completions", KEY, body)[0] == 200
    status, text = ask(lane, method, path, key)
    assert status == 200, status
    lines = text.decode().splitlines()
    samples = [ln for ln in lines if not ln.startswith("#")]
    assert samples and all(SAMPLE.fullmatch(ln) for ln in samples), [
        ln for ln in samples if not SAMPLE.fullmatch(ln)
    ]
    assert all(ln.startswith(("# TYPE ", "# HELP ")) for ln in lines if ln.startswith("#"))
    assert KEY not in text.decode() and KEY[-12:] not in text.decode() and marker not in text.decode()
    assert any(float(ln.rsplit(" ", 1)[1]) > 0 for ln in samples if "prompt_tokens_total" in ln)


BROKEN = {
    "body-not-json": lambda path: (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nContent-Length: 9\r\n"
        "Connection: close\r\n\r\n{not json"
    ).encode(),
    "length-not-a-number": lambda path: (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nContent-Length: lots\r\n"
        "Connection: close\r\n\r\n{}"
    ).encode(),
    "length-negative": lambda path: (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nContent-Length: -5\r\n"
        "Connection: close\r\n\r\n{}"
    ).encode(),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
@pytest.mark.parametrize("method,path", _routes("post"))
def test_a_broken_request_gets_an_answer_and_the_lane_stays_up(lane, figures, method, path, case):
    answer = raw(lane, BROKEN[case](path))
    status_line = answer.split(b"\r\n", 1)[0]
    parts = status_line.split()
    refused = len(parts) >= 2 and parts[1].isdigit() and 400 <= int(parts[1]) < 500
    bad_input(figures, "demo-lane-http", refused=refused)
    assert refused, answer[:300]
    assert still_serving(lane)
