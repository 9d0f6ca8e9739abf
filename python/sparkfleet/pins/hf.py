"""hf pins: a Hugging Face model repo's revision (branch, tag, commit or commit prefix) as a full commit."""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request

from ..fleet.inventory import Pin
from .common import HEX, HTTP_TIMEOUT_S, Endpoints, PinError, PinState, Unreachable, pin_state


def _hf_json(url: str) -> tuple[object, str | None]:
    headers = {"Accept": "application/json"}
    token = os.environ.get("HF_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=HTTP_TIMEOUT_S) as resp:
        link = resp.headers.get("Link")
        nxt = re.search(r'<([^>]+)>;\s*rel="next"', link or "")
        return json.load(resp), (nxt.group(1) if nxt else None)


def hf_revision(repo: str, revision: str, endpoints: Endpoints) -> str | None:
    """The commit a HF model repo's revision (branch, tag or commit) names; None if it names none."""
    base = endpoints.hf.rstrip("/")
    quoted = urllib.parse.quote(revision, safe="")
    try:
        doc, _ = _hf_json(f"{base}/api/models/{repo}/revision/{quoted}")
        return doc.get("sha") if isinstance(doc, dict) else None
    except urllib.error.HTTPError as exc:
        if exc.code not in (400, 404):
            raise Unreachable(f"{base}: HTTP {exc.code} for {repo}@{revision}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise Unreachable(f"{base}: {getattr(exc, 'reason', exc)}") from None
    if not HEX.fullmatch(revision):
        return None
    # A commit prefix is not a revision the API takes: walk the main branch's history for it.
    url: str | None = f"{base}/api/models/{repo}/commits/main"
    found: set[str] = set()
    try:
        while url:
            commits, url = _hf_json(url)
            found |= {
                c["id"] for c in commits if isinstance(c, dict) and str(c.get("id", "")).startswith(revision)
            }
    except urllib.error.HTTPError as exc:
        raise Unreachable(f"{base}: HTTP {exc.code} listing {repo} commits") from None
    except (urllib.error.URLError, OSError) as exc:
        raise Unreachable(f"{base}: {getattr(exc, 'reason', exc)}") from None
    if len(found) > 1:
        raise PinError(f"{repo}: prefix {revision} is ambiguous ({', '.join(sorted(found))})")
    return found.pop() if found else None


def resolve_hf(pin: Pin, endpoints: Endpoints) -> PinState:
    try:
        sha = hf_revision(pin.source, pin.value, endpoints)
    except Unreachable as exc:
        return pin_state(pin, "unreachable", detail=exc.message)
    except PinError as exc:
        return pin_state(pin, "drift", detail=exc.message)
    if sha is None:
        return pin_state(pin, "drift", detail=f"{pin.source} has no revision {pin.value!r}")
    if HEX.fullmatch(pin.value) and not sha.startswith(pin.value):
        return pin_state(pin, "drift", current=sha, detail=f"{pin.value!r} now names {sha}")
    return pin_state(pin, "resolved", current=sha, detail=f"{endpoints.hf.rstrip('/')}/{pin.source}")
