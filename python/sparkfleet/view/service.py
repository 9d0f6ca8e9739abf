"""`sparkfleet view serve` as a core function: where it listens, its key, its loop and its targets.

The CLI parses and prints; this decides: a listen address is checked (host:port, a port in
range), a non-loopback one gets the view's key (made once, 0600, under the operator's state dir:
`<state>/view/keys/view.key`), the refresh loop starts, and with a targets folder every refresh
rewrites the file_sd files when the inventory changed what they say.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import ExitCode, SparkfleetError
from ..base.paths import operator_state_dir
from ..facts import apikeys
from ..fleet.inventory import Inventory
from .refresh import Refresher
from .server import ViewServer, is_loopback, serve
from .targets import write_targets

DEFAULT_PORT = 9841
KEY_NAME = "view"
_LISTEN = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]{0,252}|):([0-9]{1,5})$")


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    @property
    def url(self) -> str:
        host = self.host if self.host not in ("", "0.0.0.0", "[::]") else "127.0.0.1"
        return f"http://{host}:{self.port}"

    @property
    def scrape_address(self) -> str:
        """host:port as Prometheus on this machine reaches it."""
        return self.url.removeprefix("http://")


def parse_listen(text: str) -> Listen:
    """HOST:PORT, [V6]:PORT or :PORT (every interface); anything else is a usage error naming it."""
    m = _LISTEN.match(text)
    port = int(m.group(2)) if m else 0
    if not m or not 0 < port < 65536:
        raise SparkfleetError(
            f"--listen {text[:80]!r} is not HOST:PORT",
            hint=f"e.g. 127.0.0.1:{DEFAULT_PORT} (this machine only) or 0.0.0.0:{DEFAULT_PORT} (with a key)",
            exit_code=ExitCode.USAGE,
        )
    return Listen(m.group(1), port)


def state_dir() -> Path:
    return operator_state_dir() / "view"


def key_for(listen: Listen) -> tuple[str | None, Path | None]:
    """The key the service asks for, and its file: none on loopback, else made once and kept."""
    if is_loopback(listen.host):
        return None, None
    key = apikeys.read_key(state_dir(), KEY_NAME)
    if key is None:
        key = apikeys.new_key()
        apikeys.write_key(state_dir(), KEY_NAME, key)
    return key, apikeys.key_path(state_dir(), KEY_NAME)


@dataclass
class Service:
    server: ViewServer
    refresher: Refresher
    listen: Listen
    key_file: Path | None

    def run(self) -> None:
        self.refresher.start()
        try:
            self.server.serve_forever(poll_interval=0.5)
        finally:
            self.refresher.stop()
            self.server.server_close()


def start(
    load: Callable[[], Inventory],
    listen: Listen,
    interval_s: float,
    node_timeout_s: float,
    targets_dir: Path | None = None,
    gateway_state: Path | None = None,
) -> Service:
    """Bind the service (refusing a busy port with the address), ready to `run()`."""
    if interval_s <= 0 or node_timeout_s <= 0:
        raise SparkfleetError("--interval and --node-timeout must be positive", exit_code=ExitCode.USAGE)
    key, key_file = key_for(listen)

    def after_load(inv: Inventory) -> None:
        if targets_dir is not None:
            write_targets(inv, listen.scrape_address, targets_dir)

    refresher = Refresher(load, interval_s, node_timeout_s, gateway_state, after_load=after_load)
    try:
        server = serve(refresher, listen.host, listen.port, key, interval_s)
    except OSError as exc:
        busy = exc.errno == errno.EADDRINUSE
        raise SparkfleetError(
            f"cannot listen on {listen.host or '*'}:{listen.port}: {exc.strerror or exc}",
            hint="another process has the port: pick another --listen" if busy
            else "--listen names an address of this machine (or :PORT for every interface)",
            exit_code=ExitCode.BUSY if busy else ExitCode.USAGE,
        ) from None
    return Service(server, refresher, listen, key_file)
