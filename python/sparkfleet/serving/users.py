"""Per-user API keys of the gateway: one 0600 file per user under the gateway's state dir.

Why they are not smg's own `--tenant-api-key`: smg forwards the client's `Authorization` header to
the worker and sends its worker key only when the client sent none ("HTTP regular router: the
client's Authorization header, as sent ... the worker sees the client's token: the shared key, or a
tenant key when the client used one", smg docs/concepts/security/authentication.md, lightseekorg/smg
@ ee4afa9c; `extract_auth_header` in model_gateway/src/routers/common/header_utils.rs: "User's
Authorization header takes priority"). A lane keyed with the gateway's key therefore refuses a
tenant key with 401 (measured: tests/serving/test_gateway.py, test_per_user_keys_...). So the user
keys are checked one step earlier, by nginx in front of smg (`serving.front`), which then calls smg
with the gateway's key and names the user in smg's tenant header: lanes still take only the
gateway's key.

A user's key is shown once, when it is made (`sparkfleet keys add USER`); `keys list` shows names
and dates only.

Revoking converges: `begin_revoke` renames `USER.key` to `USER.revoking`, so no rewrite of the
front's map (this one or a concurrent `keys add`'s) admits the key again; the caller reloads the
front and confirms the 401; `finish_revoke` then removes the file. A revoke stopped anywhere in
between (an error, `kill -9`) leaves the user listed as "revoking", and a rerun picks it up there.
One user's bad file (mode, type, content) leaves that user out of the map and blocks nobody else.
Every change of the files and the reload after it happen under `users/.lock` (flock), so two
`keys add` at once cannot overwrite each other's map.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..base.atomic import create_new, ensure_dir, fsync_dir, sweep_temps, write_bytes
from ..base.errors import ExitCode, SparkfleetError
from ..base.lock import held
from ..facts.apikeys import new_key

USERS_DIR = "users"
KEY_SUFFIX = ".key"
REVOKING_SUFFIX = ".revoking"  # a key being revoked: out of the front's map, the user still listed
LOCK_NAME = ".lock"
# a user name is a file name and an nginx map value; the operator's own name is taken
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
OPERATOR = "operator"  # the name the gateway's own key goes by at the front
ADMIN = "admin"  # the name the operator's admin key goes by in the front's access log
# what nginx's map matches literally inside a regex (apikeys.new_key makes only these)
KEY_CHARS = re.compile(r"[A-Za-z0-9_-]{16,512}")


@dataclass(frozen=True)
class User:
    name: str
    created: float  # the key file's mtime
    revoking: bool = False  # a revoke began and did not finish: `keys revoke NAME` again


def users_dir(state_dir: Path) -> Path:
    return Path(state_dir) / USERS_DIR


def check_name(name: str) -> str:
    if not NAME.fullmatch(name) or name in (OPERATOR, ADMIN):
        raise SparkfleetError(
            f"user {name!r}: a user name is 1-64 letters, digits, '.', '_' or '-' "
            f"(not {OPERATOR!r} or {ADMIN!r})",
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


@dataclass(frozen=True)
class KeyFiles:
    """The user key files as the front reads them."""

    admitted: dict[str, str]  # user -> key: 0600 regular files holding a key the front can match
    refused: dict[str, str]  # user -> why their file is left out (they get 401 until it is fixed)


def _check_file(path: Path) -> str:
    """The key in a user's file; refused unless a 0600 regular file holding a well-formed key."""
    st = path.lstat()
    if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077:
        raise SparkfleetError(
            f"{path}: not a 0600 regular file (others could read a user's key)",
            hint=f"sparkfleet keys revoke {path.stem}, then keys add it again (it may have leaked)",
        )
    return check_key_chars(path.read_text().strip(), str(path))


def _held_key(path: Path) -> str | None:
    """The key a user's file holds, whatever its mode (to confirm the front refuses it); None when it
    holds none the front could ever have admitted (not a regular file, not a well-formed key)."""
    try:
        if not stat.S_ISREG(path.lstat().st_mode):
            return None
        key = path.read_text(errors="replace").strip()
    except OSError:
        return None
    return key if KEY_CHARS.fullmatch(key) else None


@contextmanager
def locked(state_dir: Path) -> Iterator[None]:
    """Hold the users' lock (flock: the kernel drops it when the holder dies, `kill -9` included)."""
    d = users_dir(state_dir)
    ensure_dir(Path(state_dir), 0o700)
    ensure_dir(d, 0o700)
    os.chmod(d, 0o700)
    with held(d / LOCK_NAME):
        sweep_temps(d)  # a writer killed mid-write left its temp; no other writer is in flight
        yield


def add(state_dir: Path, name: str, out: Path | None = None) -> str:
    """Make USER's key (refused if USER has one: revoke first); returns it, the only time it is shown.

    With `out`, the key is written there first: a path that cannot be written creates nothing. The
    user's file is created exclusively (link(2)), so of two `keys add USER` at once one is refused.
    Call it under `locked`.
    """
    check_name(name)
    path, marker = _paths(state_dir, name)
    if os.path.lexists(marker):
        raise SparkfleetError(
            f"revoking {name}'s key did not finish ({marker})",
            hint=f"sparkfleet keys revoke {name}; then keys add {name}",
            exit_code=ExitCode.REFUSED,
        )
    if os.path.lexists(path):
        raise _has_key(name, path)
    key = new_key()
    if out is not None:
        try:
            write_bytes(out, (key + "\n").encode(), mode=0o600)
        except OSError as exc:
            raise SparkfleetError(
                f"--out {out}: cannot write the key there ({exc.strerror}); no key was made for {name}",
                hint="give --out a file in a directory you can write, e.g. --out ./alice.key",
            ) from None
    try:
        create_new(path, (key + "\n").encode(), mode=0o600)
    except FileExistsError:
        if out is not None:
            out.unlink(missing_ok=True)  # it holds the key that lost: nobody may use it
        raise _has_key(name, path) from None
    return key


def discard(state_dir: Path, name: str, out: Path | None = None) -> None:
    """Undo `add` when the gateway did not take the key: the key was never shown, so nobody holds it."""
    path = _paths(state_dir, name)[0]
    path.unlink(missing_ok=True)
    fsync_dir(path.parent)
    if out is not None:
        out.unlink(missing_ok=True)


def _has_key(name: str, path: Path) -> SparkfleetError:
    return SparkfleetError(
        f"user {name} already has a key ({path})",
        hint=f"`sparkfleet keys revoke {name}` first to give them a new one",
        exit_code=ExitCode.REFUSED,
    )


def _paths(state_dir: Path, name: str) -> tuple[Path, Path]:
    d = users_dir(state_dir)
    return d / f"{name}{KEY_SUFFIX}", d / f"{name}{REVOKING_SUFFIX}"


def begin_revoke(state_dir: Path, name: str) -> str | None:
    """Take USER's key out of the map's sources (USER.key -> USER.revoking, durable); returns the key
    it held, to confirm the front refuses it (None: it held none the front could have admitted).
    A revoke that did not finish is picked up where it stopped. Call it under `locked`."""
    check_name(name)
    path, marker = _paths(state_dir, name)
    if os.path.lexists(path):
        os.replace(path, marker)
        fsync_dir(path.parent)
    elif not os.path.lexists(marker):
        raise SparkfleetError(f"user {name} has no key ({path})", hint="sparkfleet keys list")
    return _held_key(marker)


def finish_revoke(state_dir: Path, name: str) -> None:
    """Remove USER's revoked key file, once the front refuses the key."""
    marker = _paths(state_dir, name)[1]
    marker.unlink(missing_ok=True)
    fsync_dir(marker.parent)


def listing(state_dir: Path) -> list[User]:
    """Every user with a key file, or with a revoke that did not finish (`revoking`)."""
    d = users_dir(state_dir)
    if not d.is_dir():
        return []
    out = {}
    for suffix, revoking in ((KEY_SUFFIX, False), (REVOKING_SUFFIX, True)):
        for p in d.glob(f"*{suffix}"):
            name = p.name[: -len(suffix)]
            if NAME.fullmatch(name) and (revoking or name not in out):
                out[name] = User(name, p.lstat().st_mtime, revoking)
    return [out[n] for n in sorted(out)]


def key_files(state_dir: Path) -> KeyFiles:
    """Every user key file checked (0600, regular, a key the front can match), for the front's map."""
    admitted, refused = {}, {}
    for u in listing(state_dir):
        if u.revoking:
            continue
        try:
            admitted[u.name] = _check_file(_paths(state_dir, u.name)[0])
        except SparkfleetError as exc:
            refused[u.name] = exc.message
        except OSError as exc:
            refused[u.name] = f"{exc.filename}: {exc.strerror}"
    return KeyFiles(admitted, refused)
