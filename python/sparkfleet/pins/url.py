"""url pins: fixed-output downloads, hashed by downloading them (sha256, and the SRI Nix wants)."""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.request

from ..fleet.inventory import Pin
from .common import HEX, HTTP_TIMEOUT_S, PinState, Unreachable, pin_state, sri_of_hex


def url_sha256(url: str) -> str:
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as resp:
            while chunk := resp.read(1 << 20):
                digest.update(chunk)
    except urllib.error.HTTPError as exc:
        raise Unreachable(f"{url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise Unreachable(f"{url}: {getattr(exc, 'reason', exc)}") from None
    return digest.hexdigest()


def resolve_url(pin: Pin) -> PinState:
    try:
        got = url_sha256(pin.source)
    except Unreachable as exc:
        return pin_state(pin, "unreachable", detail=exc.message)
    if HEX.fullmatch(pin.value) and not got.startswith(pin.value):
        return pin_state(pin, "drift", current=got, detail=f"download hashes to {got}, recorded {pin.value}")
    return pin_state(pin, "resolved", current=got, nix_hash=sri_of_hex(got), detail="downloaded and hashed")
