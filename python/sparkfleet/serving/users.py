"""Per-user API keys of the gateway: one 0600 file per user under the gateway's state dir.

Why they are not smg's own `--tenant-api-key`: smg forwards the client's `Authorization` header to
the worker and sends its worker key only when the client sent none ("HTTP regular router: the
client's Authorization header, as sent ... the worker sees the client's token: the shared key, or a
tenant key when the client used one", smg docs/concepts/security/authentication.md, lightseekorg/smg
@ ee4afa9c; `extract_auth_header` in model_gateway/src/routers/common/header_utils.rs: "User's
Authorization header takes priority"). A lane keyed with the gateway's key therefore refuses a
tenant key with 401 (measured: tests/launch/test_gateway.py, test_per_user_keys_...). So the user
keys are checked one step earlier, by nginx in front of smg (`serving.front`), which then calls smg
with the gateway's key and names the user in smg's tenant header: lanes still take only the
gateway's key.

A user's key is shown once, when it is made (`sparkfleet keys add USER`); `keys list` shows names
and dates only; `keys revoke USER` removes the file and reloads a running gateway.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from ..apikeys import new_key
from ..atomic import ensure_dir, fsync_dir, write_bytes
from ..errors import ExitCode, SparkfleetError

USERS_DIR = "users"
# a user name is a file name and an nginx map value; the operator's own name is taken
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
OPERATOR = "operator"  # the name the gateway's own key goes by at the front
# what nginx's map matches literally inside a regex (apikeys.new_key makes only these)
KEY_CHARS = re.compile(r"[A-Za-z0-9_-]{16,512}")


@dataclass(frozen=True)
class User:
    name: str
    created: float  # the key file's mtime


def users_dir(state_dir: Path) -> Path:
    return Path(state_dir) / USERS_DIR


def check_name(name: str) -> str:
    if not NAME.fullmatch(name) or name == OPERATOR:
        raise SparkfleetError(
            f"user {name!r}: a user name is 1-64 letters, digits, '.', '_' or '-' (not {OPERATOR!r})",
            hint="e.g. sparkfleet keys add alice",
        )
    return name


def check_key_chars(key: str, where: str) -> str:
    """Keys the front can match exactly: letters, digits, '_' and '-' (what apikeys.new_key makes)."""
    if not KEY_CHARS.fullmatch(key):
        raise SparkfleetError(
            f"{where}: the gateway takes keys of 16-512 letters, digits, '_' or '-'",
            hint="let sparkfleet make the key (`sparkfleet keys add USER`)",
        )
    return key


def _read(path: Path) -> str:
    st = path.lstat()
    if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077:
        raise SparkfleetError(
            f"{path}: not a 0600 regular file (others could read a user's key)",
            hint=f"sparkfleet keys revoke {path.stem}, then keys add it again (it may have leaked)",
        )
    return check_key_chars(path.read_text().strip(), str(path))


def add(state_dir: Path, name: str) -> str:
    """Make USER's key (refused if USER has one: revoke first); returns it, the only time it is shown."""
    check_name(name)
    d = users_dir(state_dir)
    ensure_dir(Path(state_dir), 0o700)
    ensure_dir(d, 0o700)
    os.chmod(d, 0o700)
    path = d / f"{name}.key"
    if path.exists():
        raise SparkfleetError(
            f"user {name} already has a key ({path})",
            hint=f"`sparkfleet keys revoke {name}` first to give them a new one",
            exit_code=ExitCode.REFUSED,
        )
    key = new_key()
    write_bytes(path, (key + "\n").encode(), mode=0o600)
    return key


def revoke(state_dir: Path, name: str) -> str:
    """Remove USER's key file; returns the key it held (to confirm the gateway refuses it now)."""
    check_name(name)
    path = users_dir(state_dir) / f"{name}.key"
    if not path.exists():
        raise SparkfleetError(f"user {name} has no key ({path})", hint="sparkfleet keys list")
    key = _read(path)
    path.unlink()
    fsync_dir(path.parent)
    return key


def listing(state_dir: Path) -> list[User]:
    d = users_dir(state_dir)
    if not d.is_dir():
        return []
    return [User(p.stem, p.stat().st_mtime) for p in sorted(d.glob("*.key")) if NAME.fullmatch(p.stem)]


def keys(state_dir: Path) -> dict[str, str]:
    """user -> key, for the front's map (every file checked: 0600, a key the front can match)."""
    return {u.name: _read(users_dir(state_dir) / f"{u.name}.key") for u in listing(state_dir)}
