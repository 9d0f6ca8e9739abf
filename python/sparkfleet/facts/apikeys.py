"""A lane's API key: one secret file per lane on each of its hosts, never in a recipe, git or argv.

Every lane used to serve on 0.0.0.0:<port> with no authentication; anyone on the LAN could use a
1M-context model. Now each lane has a key at `<state_dir>/keys/<lane>.key` (0600, directory
0700) on every host of the lane, written by `sparkfleet bootstrap` or `sparkfleet keys rotate LANE`.

How the key reaches each party, and why that way:
- the engine: the launch agent puts it into the rank's 0600 env file (containers: `--env-file`) as
  `SPARKFLEET_API_KEY` and `VLLM_API_KEY` (vLLM reads the latter itself: vllm/envs.py
  `"VLLM_API_KEY": lambda: os.environ.get("VLLM_API_KEY", None)`). SGLang reads no such variable
  (server_args.py: `api_key` is a plain `--api-key` flag), and a flag value shows in `ps`; its
  recipes pass `--config {api_key_config}`, a 0600 YAML file holding `api-key: KEY`, which SGLang's
  ConfigArgumentMerger (server_args_config_parser.py) merges into its arguments in-process. The
  demo server reads the variable its `--api-key-env` names.
- the clients (smoke, bench, watch, promote's gate, the quality run): read from the head host's file
  (through the launch agent's stdin/stdout, never argv) and sent as `Authorization: Bearer`.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from ..base.atomic import ensure_dir, write_bytes
from ..base.errors import SparkfleetError

KEYS_DIR = "keys"
# The names the key is given in a rank's env file (see the module docstring for each reader).
ENGINE_ENV = ("SPARKFLEET_API_KEY", "VLLM_API_KEY")
KEY_PREFIX = "sk-sf-"
MAX_KEY_CHARS = 512
# An inference path outside /v1 that a lane must refuse without its key: vLLM's key guards only
# /v1, /v2, /inference and /cohere, and its SageMaker route serves completions to anyone. Launch
# asks it (POST, `{}`, no key) before it calls a lane ready, doctor on every check.
KEYLESS_PROBE = "/invocations"
REFUSED = (401, 403, 404, 405)  # what a lane may answer there: no key, or no such route


def key_path(state_dir: Path, lane: str) -> Path:
    return Path(state_dir) / KEYS_DIR / f"{lane}.key"


def config_path(state_dir: Path, lane: str) -> Path:
    """The 0600 YAML (`api-key: KEY`) an SGLang rank reads through `--config`."""
    return Path(state_dir) / KEYS_DIR / f"{lane}.sglang.yaml"


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def check_key(key: str, where: str) -> str:
    """A key must fit one env-file line and one header value: printable ASCII, no spaces."""
    if not key or not all(33 <= ord(c) < 127 for c in key) or len(key) > MAX_KEY_CHARS:
        raise SparkfleetError(
            f"{where}: an API key must be 1-512 printable ASCII characters without spaces",
            hint="let `sparkfleet keys rotate LANE` make one",
        )
    return key


def read_key(state_dir: Path, lane: str) -> str | None:
    """The lane's key on this host, or None when it has none; a key file others can read is refused.

    Whoever can write the state dir can leave anything under the key's name: it is opened without
    following a link or blocking on a FIFO, judged by what was opened, and read only as far as a
    key can be long; bytes that are no text are refused like any other bad key.
    """
    path = key_path(state_dir, lane)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:  # ELOOP: a link; EISDIR and the like
        raise SparkfleetError(f"{path}: not a regular file ({exc.strerror})",
                              hint=f"sparkfleet keys rotate {lane}") from None  # fmt: skip
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SparkfleetError(f"{path}: not a regular file", hint=f"sparkfleet keys rotate {lane}")
        if st.st_mode & 0o077:
            raise SparkfleetError(
                f"{path}: mode {oct(st.st_mode & 0o777)} lets others read the lane's API key",
                hint=f"chmod 600 {path}, then sparkfleet keys rotate {lane} (it may have leaked)",
            )
        raw = os.read(fd, MAX_KEY_CHARS + 2)  # the key and its newline; more is not a key
    finally:
        os.close(fd)
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        text = "\0"  # refused below as any key that is not printable ASCII
    return check_key(text.strip(), str(path))


def write_key(state_dir: Path, lane: str, key: str) -> bool:
    """Install `key` for the lane on this host (atomic, 0600 in a 0700 directory); True if it changed."""
    check_key(key, f"lane {lane}")
    d = Path(state_dir) / KEYS_DIR
    ensure_dir(d, 0o700)
    os.chmod(d, 0o700)
    changed = write_bytes(key_path(state_dir, lane), (key + "\n").encode(), mode=0o600)
    write_bytes(config_path(state_dir, lane), f"api-key: {key}\n".encode(), mode=0o600)
    return changed


def scrub(text: str, key: str | None) -> str:
    """`text` with every copy of the key replaced (an engine may log its own arguments)."""
    return text.replace(key, "<redacted>") if key else text
