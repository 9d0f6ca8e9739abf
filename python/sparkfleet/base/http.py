"""The package's one small HTTP client call and its one way to pick a free port.

`get_json` is how a controller or a node asks a local server a yes/no question over HTTP (is the
lane up, does it take this key, which workers does the router see): it never raises for what a
server sends, and reads at most MAX_ANSWER_BYTES. The bench client (bench/client.py) is the other
HTTP path on purpose: it measures, holds a total deadline over a streamed answer and speaks HTTPS.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any

# The largest answer read here is the router's /workers (one JSON object per worker, growing with
# the fleet); the others are small (/health is empty, an engine's /v1/models names one model, the
# keyless probe's refusal is one line). 64 KiB would cut a large router listing mid-document, where
# it reads as "not JSON"; 1 MiB holds every caller's answer with room to spare, and more would only
# let a hostile server make the caller hold more memory.
MAX_ANSWER_BYTES = 1 << 20


def get_json(
    url: str, *, key: str | None = None, data: bytes | None = None, timeout: float = 3.0
) -> tuple[int | None, Any]:
    """GET `url` (POST `data` as JSON when given), with the key as a bearer token when given:
    (the HTTP status, or None when nothing answered; the JSON body, or None when it is not JSON)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if data is not None:
        headers["Content-Type"] = "application/json"
    try:
        request = urllib.request.Request(url, data=data, headers=headers)
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            status, raw = resp.status, resp.read(MAX_ANSWER_BYTES)
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (urllib.error.URLError, OSError, ValueError):
        return None, None
    try:
        return status, json.loads(raw or b"null")
    except (ValueError, RecursionError):
        return status, None


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port free on `address` right now (the kernel's choice; IPv6 when it has a colon)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])
