"""A counting TCP relay between tool-eval-bench and the lane: what the quality run receives, live.

Why: tool-eval-bench reports a scenario when it starts and when it ends; one scenario can stream
for minutes (a reasoning model on a long tool chain) while nothing it prints moves. The relay
passes every byte unchanged both ways and counts what the lane sends back: bytes, and
server-sent-event `data:` frames (one per streamed chunk, about a token each on vLLM and SGLang;
`data: [DONE]` is not counted). Plain http only: a TLS endpoint is reached directly, since a relay
on 127.0.0.1 would break its certificate's name check.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

FRAME = b"\ndata:"
DONE = b"\ndata: [DONE]"


@dataclass(frozen=True)
class Traffic:
    """What the lane sent back through the relay so far."""

    bytes: int
    frames: int


class CountingRelay:
    """Listen on 127.0.0.1:<ephemeral>, relay each connection to (host, port), count the replies."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._lock = threading.Lock()
        self._bytes = 0
        self._frames = 0
        self._socks: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = threading.Event()

    @classmethod
    def for_url(cls, base_url: str) -> CountingRelay | None:
        """A relay to the URL's host, or None where one cannot stand in (https, no host)."""
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            return None
        return cls(parts.hostname, parts.port or 80)

    def url(self, base_url: str) -> str:
        """`base_url` with its host and port replaced by the relay's."""
        parts = urlsplit(base_url)
        return urlunsplit(parts._replace(netloc=f"127.0.0.1:{self.port}"))

    def traffic(self) -> Traffic:
        with self._lock:
            return Traffic(self._bytes, self._frames)

    def __enter__(self) -> CountingRelay:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            with contextlib.suppress(OSError):
                s.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=30)
                upstream.settimeout(None)
            except OSError:
                client.close()  # the caller sees a refused/reset connection, as without the relay
                continue
            with self._lock:
                self._socks += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, count: bool) -> None:
        carry = b"\n"  # a frame at the very start of a reply body follows the header's blank line
        try:
            while chunk := src.recv(1 << 16):
                dst.sendall(chunk)
                if count:
                    seen = carry + chunk
                    with self._lock:
                        self._bytes += len(chunk)
                        # occurrences wholly inside `carry` were counted with the previous chunk
                        new = seen.count(FRAME) - carry.count(FRAME)
                        self._frames += new - (seen.count(DONE) - carry.count(DONE))
                    carry = seen[-(len(DONE) - 1) :]
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
