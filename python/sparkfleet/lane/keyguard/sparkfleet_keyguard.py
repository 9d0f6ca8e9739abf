"""The lane's key on every path of a vLLM server but its health check and its metrics.

Why: vLLM's `--api-key` (and VLLM_API_KEY, which launch sets) guards only paths under /v1, /v2,
/inference and /cohere (vllm/entrypoints/serve/middleware/authenticate.py, GUARDED_PREFIX). Its
other routes answer anyone: `POST /invocations` (SageMaker's route) serves completions and chat,
and /tokenize, /detokenize, /generative_scoring, /scale_elastic_ep, /load and /version answer
too; a sparkfleet lane launched with its key served all of them without it (vLLM 0.32, CPU engine).
vLLM takes ASGI middleware by import path (`--middleware MODULE.CLASS`, added outside its own),
so a recipe passes `"--middleware", "{vllm_key_guard}"` and launch puts this module's folder on
the rank's PYTHONPATH (containers: bound read-only at /run/sparkfleet/keyguard).

This file is imported by the engine's own Python, not sparkfleet's: the standard library only.
Open without the key: /health (readiness and load balancers: "ok" or not) and /metrics
(Prometheus scrapes the engines with no lane key; counters only). Everything else, websockets
included, needs `Authorization: Bearer KEY`, KEY being $VLLM_API_KEY (or $SPARKFLEET_API_KEY);
with neither set, every guarded path is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os

OPEN = ("/health", "/metrics")
KEY_ENV = ("VLLM_API_KEY", "SPARKFLEET_API_KEY")


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).digest()


class RequireKey:
    """ASGI middleware: 401 unless the path is OPEN or the request carries the lane's key."""

    def __init__(self, app) -> None:  # noqa: ANN001 - an ASGI app
        self.app = app
        keys = [os.environ.get(name) for name in KEY_ENV]
        self.keys = [_digest(k) for k in keys if k]

    def allowed(self, scope: dict) -> bool:
        path = scope.get("path", "")
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        if path in OPEN and scope.get("type") == "http" and scope.get("method") in ("GET", "HEAD"):
            return True
        header = b""
        for name, value in scope.get("headers", ()):
            if name.lower() == b"authorization":
                header = value
                break
        scheme, _, token = header.decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return False
        given = _digest(token.strip())
        return any(hmac.compare_digest(given, k) for k in self.keys)

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001 - ASGI
        if scope.get("type") not in ("http", "websocket") or self.allowed(scope):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"error": "Unauthorized: this lane needs its key"}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"www-authenticate", b"Bearer")]  # fmt: skip
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})
