"""The fleet registry's push login: who may push or tag, and how skopeo proves it.

Why a login at all: an anonymous `skopeo copy` could otherwise move a release's tag to another
digest or take a new one, so "a release's tag is never moved" would hold only for sparkfleet's own
cuts. distribution's htpasswd auth (the registry's only built-in one; it reads bcrypt hashes
only) asks every request for the login, pulls included, so the registry listens twice on one
storage (registry_host.py): the login guards the push listener; the pull listener is read-only.

`registry init` makes one login: its bcrypt hash in `htpasswd` (what the registry reads) and the
login itself in `push-auth.json`, in the containers-auth.json format skopeo reads with
`--authfile`, both 0600 under `$SPARKFLEET_STATE_DIR/registry/`. The password goes into no
command line, log, report or error message: skopeo reads it from the file.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
from pathlib import Path

from ..base.atomic import write_bytes
from .registry import RegistryError

USER = "sparkfleet"
AUTH_FILE = "push-auth.json"
HTPASSWD_FILE = "htpasswd"


def auth_path(state_dir: Path) -> Path:
    return Path(state_dir) / "registry" / AUTH_FILE


def htpasswd_path(state_dir: Path) -> Path:
    return Path(state_dir) / "registry" / HTPASSWD_FILE


def _read(authfile: Path) -> dict[str, str]:
    """push address -> password, from a containers-auth.json file (refused, naming it, if malformed)."""
    try:
        doc = json.loads(Path(authfile).read_text())
        out = {}
        for address, entry in doc["auths"].items():
            user, _, password = base64.b64decode(entry["auth"], validate=True).decode().partition(":")
            if user != USER or not password:
                raise ValueError(f"the login for {address} is not {USER}'s")
            out[address] = password
    except FileNotFoundError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError, binascii.Error) as exc:
        raise RegistryError(
            f"{authfile}: not a push login written by `registry init` ({type(exc).__name__})",
            hint="rerun `sparkfleet registry init --address HOST:PORT` on the head host (it keeps the "
            "password), and copy the file",
        ) from None
    return out


def push_endpoint(authfile: Path) -> str | None:
    """The push address the login in `authfile` is for (None: no such file)."""
    try:
        logins = _read(authfile)
    except FileNotFoundError:
        return None
    if len(logins) != 1:
        raise RegistryError(
            f"{authfile}: {len(logins)} registry logins, where `registry init` writes one",
            hint="rerun `sparkfleet registry init --address HOST:PORT` on the head host and copy the file",
        )
    return next(iter(logins))


def ensure_login(state_dir: Path, push_address: str) -> Path:
    """The push login for `push_address`: made once, kept on a rerun (a new push address keeps
    the password); the registry's htpasswd is rewritten only when it no longer matches."""
    import bcrypt  # the registry reads bcrypt only; imported here, where the one hash is made

    authfile, htpasswd = auth_path(state_dir), htpasswd_path(state_dir)
    try:
        password = next(iter(_read(authfile).values()), None)
    except FileNotFoundError:
        password = None
    password = password or secrets.token_urlsafe(32)
    login = base64.b64encode(f"{USER}:{password}".encode()).decode()
    doc = {"auths": {push_address: {"auth": login}}}
    write_bytes(authfile, json.dumps(doc, indent=1).encode(), mode=0o600)
    try:
        user, _, hashed = htpasswd.read_text().strip().partition(":")
        current = user == USER and bcrypt.checkpw(password.encode(), hashed.encode())
    except (OSError, ValueError):
        current = False
    if not current:
        hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt()).decode()
        write_bytes(htpasswd, f"{USER}:{hashed}\n".encode(), mode=0o600)
    return authfile
