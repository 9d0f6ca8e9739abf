"""The head host's registry: `registry init` writes its files, `registry serve` runs it.

Two listeners serve one storage, each a `docker-registry serve` of its own config:

* `config.yml` at the `--address` given (never 0.0.0.0): what every host pulls from, by digest.
  Anonymous and read-only (distribution's `maintenance.readonly`): a push or a tag there is
  refused with 405 whoever sends it. Pulls stay anonymous because distribution's htpasswd auth
  cannot exempt them: with a login on the pull listener, every host would hold a login that can
  also push. A pull by digest cannot be swapped: the digest names the bytes.
* `push.yml` at `--push-address` (the same host, the next port, unless given): pushes and release
  tags, behind the htpasswd login (registry_auth.py).

Both serve TLS with one certificate of the fleet CA naming both hosts. Every value written into
the YAML is a JSON string (YAML reads JSON's double-quoted strings), so no address or path can
add a key of its own.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base.atomic import ensure_dir, write_bytes
from .registry import RegistryError, issue_cert, make_ca
from .registry_auth import ensure_login, htpasswd_path

REGISTRY_BIN_ENV = "SPARKFLEET_REGISTRY_BIN"
PULL_CONFIG, PUSH_CONFIG = "config.yml", "push.yml"
READ_ONLY = "    readonly:\n      enabled: true\n"
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DNS = re.compile(rf"{_LABEL}(\.{_LABEL})*")


def split_address(address: str, what: str = "registry address") -> tuple[str, int]:
    """HOST:PORT -> (host, port): HOST an IP address ([v6] in brackets) or a DNS name, PORT 1..65535."""
    host, sep, port = address.rpartition(":")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ip = ipaddress.ip_address(bare)
        ok_host = (ip.version == 6) == (bare != host) and not ip.is_unspecified
    except ValueError:
        ok_host = bare == host and bool(_DNS.fullmatch(host)) and not host.replace(".", "").isdigit()
    if not sep or not ok_host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise RegistryError(
            f"{what} {address[:80]!r} is not HOST:PORT",
            hint="e.g. 10.0.0.1:5000 (the head's fabric address: the registry listens there, and only there)",
        )
    return host, int(port)


def _yaml(value: str) -> str:
    return json.dumps(value)


def registry_config(
    root: Path, listen: str, key: Path, crt: Path, *, htpasswd: Path | None = None
) -> str:
    """distribution 2.8's config.yml: filesystem storage under root, TLS with the fleet's cert,
    deletes off (a pushed digest stays: releases point at it); with `htpasswd` the login-guarded
    push listener, without it the anonymous read-only pull listener."""
    storage = (
        "storage:\n"
        f"  filesystem:\n    rootdirectory: {_yaml(str(root))}\n"
        "  delete:\n    enabled: false\n"
    )
    auth = ""
    if htpasswd is None:  # one purger is enough, and a read-only listener must not delete
        storage += "  maintenance:\n    uploadpurging:\n      enabled: false\n" + READ_ONLY
    else:
        auth = f"auth:\n  htpasswd:\n    realm: sparkfleet\n    path: {_yaml(str(htpasswd))}\n"
    return (
        "version: 0.1\n"
        "log:\n  level: warn\n"
        + storage
        + "http:\n"
        f"  addr: {_yaml(listen)}\n"
        f"  tls:\n    certificate: {_yaml(str(crt))}\n    key: {_yaml(str(key))}\n"
        + auth
    )


def init(state_dir: Path, address: str, storage: Path, push_address: str | None = None) -> dict[str, str]:
    """The head host's registry files: the fleet CA, a certificate for both listeners, the two
    configs and the push login. Reruns converge: the CA and the login are kept."""
    host, port = split_address(address)
    if push_address is None:
        if port == 65535:
            raise RegistryError(f"registry address {address}: no next port for pushes",
                                hint="give --push-address HOST:PORT")  # fmt: skip
        push_address = f"{host}:{port + 1}"
    push_host, _ = split_address(push_address, "push address")
    if push_address == address:
        raise RegistryError(f"push address {push_address} is the pull address",
                            hint="pushes need a listener of their own: another port")  # fmt: skip
    storage = Path(storage)
    if not storage.is_absolute() or "\0" in str(storage):
        raise RegistryError(f"--storage {str(storage)[:80]!r} is not an absolute path",
                            hint="e.g. /var/lib/docker-registry")  # fmt: skip
    base = Path(state_dir) / "registry"
    ensure_dir(base, 0o700)
    ca = make_ca(base / "ca")
    key, crt = issue_cert(base / "ca", host.strip("[]"), base / "tls", push_host.strip("[]"))
    authfile = ensure_login(state_dir, push_address)
    pull, push = base / PULL_CONFIG, base / PUSH_CONFIG
    login = htpasswd_path(state_dir)
    write_bytes(pull, registry_config(storage, address, key, crt).encode(), mode=0o600)
    write_bytes(push, registry_config(storage, push_address, key, crt, htpasswd=login).encode(), mode=0o600)
    return {"ca": str(ca), "certificate": str(crt), "config": str(pull), "push_config": str(push),
            "address": address, "push_address": push_address, "push_auth": str(authfile)}  # fmt: skip


@dataclass(frozen=True)
class Listener:
    """One `docker-registry serve` of the pair: its role, address and config."""

    role: str  # "pull" (anonymous, read-only) or "push" (the login)
    address: str
    config: Path


def listeners(state_dir: Path) -> list[Listener]:
    """The two listeners `registry init` configured under state_dir (refused, saying how, without them)."""
    base = Path(state_dir) / "registry"
    hint = f"SPARKFLEET_STATE_DIR={state_dir} sparkfleet registry init --address HOST:PORT"
    out = []
    for role, name in (("pull", PULL_CONFIG), ("push", PUSH_CONFIG)):
        path = base / name
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise RegistryError(f"{path}: no registry config", hint=hint) from None
        except (OSError, UnicodeDecodeError) as exc:  # a directory, bytes that are no text
            why = exc.strerror if isinstance(exc, OSError) else "not text"
            raise RegistryError(f"{path}: not a config `registry init` writes now ({why})",
                                hint=f"rerun it: {hint}") from None  # fmt: skip
        found = re.search(r"^  addr: (\".*\")$", text, flags=re.MULTILINE)
        guarded = READ_ONLY in text if role == "pull" else "\n  htpasswd:\n" in text
        address = _address(found.group(1)) if found else None
        if not address or not guarded:
            why = "a listener without its guard" if address else "no addr of one host's HOST:PORT"
            raise RegistryError(f"{path}: not a config `registry init` writes now ({why})",
                                hint=f"rerun it: {hint}")  # fmt: skip
        out.append(Listener(role, address, path))
    return out


def _address(quoted: str) -> str | None:
    """A config's `addr` (a JSON string, as init writes it) when it is HOST:PORT of one host."""
    try:
        address = json.loads(quoted)
        split_address(address)
    except (ValueError, RegistryError):
        return None
    return address


def registry_binary() -> str:
    """$SPARKFLEET_REGISTRY_BIN (NixOS: nixpkgs' docker-distribution `registry`), else Debian's and
    Ubuntu's `docker-registry`."""
    binary = os.environ.get(REGISTRY_BIN_ENV) or shutil.which("docker-registry")
    if not binary:
        raise RegistryError(
            "docker-registry is not installed",
            hint=f"apt-get install docker-registry (DGX OS), or set {REGISTRY_BIN_ENV}",
        )
    return binary


def _answers(address: str, ca: Path) -> bool:
    """The listener completes a TLS handshake with the fleet's certificate (a bare TCP probe would
    leave a "TLS handshake error" line in the registry's log at every start)."""
    host, port = split_address(address)
    try:
        tls = ssl.create_default_context(cafile=str(ca))
        with (
            socket.create_connection((host.strip("[]"), port), timeout=1) as raw,
            tls.wrap_socket(raw, server_hostname=host.strip("[]")),
        ):
            return True
    except (OSError, ssl.SSLError):
        return False


@dataclass(frozen=True)
class Served:
    """How `serve` ended: each listener's exit code, and whether a signal asked it to stop."""

    exit_codes: dict[str, int]
    asked: bool

    @property
    def ok(self) -> bool:
        return self.asked


def serve(
    state_dir: Path,
    on_ready: Callable[[list[dict[str, Any]]], None] = lambda _l: None,
    ready_timeout: float = 30.0,
) -> Served:
    """Run both listeners in the foreground until either ends or a signal asks.

    `on_ready` gets each listener (role, address, config, pid) once both accept connections. A
    SIGTERM or SIGINT is passed to both; when one ends by itself the other is stopped too, so a
    unit with Restart= brings back the pair, never half of it.
    """
    binary, pair = registry_binary(), listeners(state_dir)
    ca = Path(state_dir) / "registry" / "ca" / "ca.crt"
    procs: dict[str, subprocess.Popen] = {}
    asked: list[int] = []

    def forward(signum: int, _frame: Any) -> None:
        asked.append(signum)
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for lis in pair:
            procs[lis.role] = subprocess.Popen([binary, "serve", str(lis.config)], stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + ready_timeout
        waiting = list(pair)
        while waiting and not asked and all(p.poll() is None for p in procs.values()):
            waiting = [lis for lis in waiting if not _answers(lis.address, ca)]
            if waiting and time.monotonic() > deadline:
                late = waiting[0]
                raise RegistryError(
                    f"the registry's {late.role} listener does not answer at {late.address} "
                    f"after {ready_timeout:g} s",
                    hint="its log is above (docker-registry's own lines)",
                )
            if waiting:
                time.sleep(0.1)
        if not waiting and not asked and all(p.poll() is None for p in procs.values()):
            on_ready([{"role": lis.role, "address": lis.address, "config": str(lis.config),
                       "pid": procs[lis.role].pid} for lis in pair])  # fmt: skip
        while not asked and all(p.poll() is None for p in procs.values()):
            time.sleep(0.2)
    finally:
        for p in procs.values():  # the survivor of a pair, or both after an error: by PID, never by name
            if p.poll() is None:
                p.terminate()
        for p in procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for s, handler in old.items():
            signal.signal(s, handler)
    return Served({role: p.returncode for role, p in procs.items()}, bool(asked))
