"""The key guard a vLLM lane runs, asked as a client of the LAN would: only /health and /metrics
without the lane's key.

vLLM's own key guards only /v1, /v2, /inference and /cohere; on a lane launched with its key,
POST /invocations (SageMaker's route) served completions to anyone, and /tokenize, /version,
/scale_elastic_ep and others answered too (tests/engine/test_engine_launch.py checks the real
engine both ways). The guard (lane/keyguard/sparkfleet_keyguard.py, vLLM's `--middleware`)
stands in front of every route. Here it wraps an app that serves every path, so anything that
gets past it shows; the cases are bad by the test's own making: vLLM's unguarded routes and
spellings of the open paths (a trailing slash, a doubled one, `..`, another case, the open path
under another method), each without a key, with a wrong one, a cut one, the key in Basic, and a
websocket; and with no key configured at all. The oracle: 401 (a websocket closed with 1008),
and the app never called.
"""

from __future__ import annotations

import asyncio

import pytest

from .surfaces import key_guard
from .tally import bad_input

KEY = "sk-sf-" + "g" * 40
GUARD = key_guard()
# vLLM 0.32's routes outside its own guard (its OpenAPI listing on a real lane), and the open
# paths spelled otherwise
PATHS = ["/invocations", "/tokenize", "/detokenize", "/generative_scoring", "/scale_elastic_ep",
         "/is_scaling_elastic_ep", "/load", "/version", "/kv_event_sources", "/ping", "/v1/completions",
         "/health/", "//health", "/health/../invocations", "/HEALTH", "/metrics/../v1/models",
         "/metricsx", "/", ""]  # fmt: skip
KEYS = {"none": None, "wrong": "Bearer sk-sf-" + "w" * 40, "cut": "Bearer " + KEY[:-1],
        "longer": "Bearer " + KEY + "x", "basic": "Basic " + KEY, "empty-bearer": "Bearer ",
        "no-scheme": KEY}  # fmt: skip


def _ask(guard, scope: dict) -> tuple[list[dict], bool]:
    """Drive the middleware once: the messages it sent, and whether the app behind it ran."""
    ran, sent = [], []

    async def app(scope, receive, send):
        ran.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"served"})

    async def receive():
        return {"type": "websocket.connect"} if scope["type"] == "websocket" else {"type": "http.request"}

    async def send(message):
        sent.append(message)

    asyncio.run(guard(app)(scope, receive, send))
    return sent, bool(ran)


def _scope(path: str, method: str = "GET", auth: str | None = None, kind: str = "http") -> dict:
    headers = [(b"authorization", auth.encode())] if auth is not None else []
    return {"type": kind, "method": method, "path": path, "root_path": "", "headers": headers}


@pytest.fixture
def guard(monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    monkeypatch.delenv("SPARKFLEET_API_KEY", raising=False)
    return GUARD.RequireKey


@pytest.mark.surface("http:vllm-lane * /*")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("method", ["GET", "POST", "DELETE"])
def test_every_other_path_needs_the_lanes_key(guard, figures, path, method):
    for name, auth in KEYS.items():
        sent, ran = _ask(guard, _scope(path, method, auth))
        refused = not ran and sent and sent[0]["status"] == 401
        bad_input(figures, "vllm-keyguard", refused=refused)
        assert refused, (method, path, name, sent)
    sent, ran = _ask(guard, _scope(path, method, f"Bearer {KEY}"))
    assert ran and sent[0]["status"] == 200  # the key opens it: the guard refuses only what it should


@pytest.mark.surface("http:vllm-lane GET /health", "http:vllm-lane GET /metrics")
@pytest.mark.parametrize("path", ["/health", "/metrics"])
def test_health_and_metrics_answer_without_the_key_and_only_to_get(guard, figures, path):
    assert _ask(guard, _scope(path))[1] and _ask(guard, _scope(path, "HEAD"))[1]
    for method in ("POST", "PUT", "DELETE", "OPTIONS"):
        sent, ran = _ask(guard, _scope(path, method))
        bad_input(figures, "vllm-keyguard", refused=not ran)
        assert not ran and sent[0]["status"] == 401, (method, path)


@pytest.mark.surface("http:vllm-lane * /*")
def test_a_websocket_without_the_key_is_closed(guard, figures):
    for path in ("/v1/realtime", "/health"):
        sent, ran = _ask(guard, _scope(path, "GET", None, "websocket"))
        bad_input(figures, "vllm-keyguard", refused=not ran)
        assert not ran and sent == [{"type": "websocket.close", "code": 1008}], (path, sent)


@pytest.mark.surface("http:vllm-lane * /*")
def test_with_no_key_configured_nothing_but_health_and_metrics_is_served(monkeypatch, figures):
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    monkeypatch.delenv("SPARKFLEET_API_KEY", raising=False)
    for auth in (None, "Bearer ", "Bearer None", f"Bearer {KEY}"):
        sent, ran = _ask(GUARD.RequireKey, _scope("/invocations", "POST", auth))
        bad_input(figures, "vllm-keyguard", refused=not ran)
        assert not ran and sent[0]["status"] == 401, auth
    assert _ask(GUARD.RequireKey, _scope("/health"))[1]
