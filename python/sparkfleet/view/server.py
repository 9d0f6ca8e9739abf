"""The view's HTTP service: /metrics for Prometheus, / for people, and the pages a row links to.

Paths (GET only; anything else is 404, any other method 405):
  /metrics                              Prometheus text (view/metrics.py)
  /                                     the fleet page (view/page.py), reloading itself
  /lanes/<lane>/history                 the lane's bench history page (what `report html` writes)
  /lanes/<lane>/reports/<file>          a report beside it (.json, .md, .png), for that page's links
  /lanes/<lane>/incidents/<bundle>      an incident bundle's summary.json, as a page

Every request is answered from the snapshot the refresh loop keeps, or from the fleet root's own
report and incident files: no request asks a node anything. A lane must be one of the snapshot's,
a bundle name a UTC id, a report file a name in the lane's reports folder: nothing in a path
reaches a file outside those folders.

The key: a service that answers beyond loopback needs one (SECURITY.md: served APIs need a key).
`Authorization: Bearer KEY` (Prometheus's `authorization.credentials_file`) or HTTP Basic with
KEY as the password (what a browser can send; Prometheus's `basic_auth.password_file`). On a
loopback address the key is optional: Prometheus on the head host scrapes it there.
"""

from __future__ import annotations

import base64
import hmac
import ipaddress
import json
import re
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

from ..bench.report.history import lane_history
from ..bench.report.html import render_page
from ..fleet.inventory import LANE_NAME, Inventory
from . import lanefiles, page
from .metrics import CONTENT_TYPE, registry_for, render
from .refresh import Refresher

INCIDENT_NAME = re.compile(r"\d{8}T\d{6}Z(-\d{1,6})?")
REPORT_FILE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}_[0-9]{6}_[A-Za-z0-9._-]{1,100}\.(json|md|png)")
REPORT_TYPES = {"json": "application/json", "md": "text/markdown; charset=utf-8", "png": "image/png"}
MAX_FILE_BYTES = 32 << 20
REQUEST_TIMEOUT_S = 10.0  # a client that sends nothing for this long is dropped
TEXT, HTML = "text/plain; charset=utf-8", "text/html; charset=utf-8"
# The page has no script and loads nothing: a value that slipped past escaping could still not run.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'"


def is_loopback(host: str) -> bool:
    """Whether a listen address answers only this machine ("" and 0.0.0.0 answer every interface)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def key_matches(header: str | None, key: str) -> bool:
    """`Bearer KEY`, or `Basic base64(any-user:KEY)`; compared in constant time."""
    if not header:
        return False
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "basic":
        try:
            value = base64.b64decode(value, validate=True).decode("utf-8").partition(":")[2]
        except (ValueError, UnicodeDecodeError):
            return False
    elif scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(value.encode("utf-8", "replace"), key.encode())


class ViewServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], refresher: Refresher, key: str | None, page_refresh_s: float
    ) -> None:
        self.refresher, self.key, self.page_refresh_s = refresher, key, page_refresh_s
        self.registry = registry_for(refresher.current)
        super().__init__(address, Handler)


class Handler(BaseHTTPRequestHandler):
    server: ViewServer
    server_version = "sparkfleet-view"
    sys_version = ""
    timeout = REQUEST_TIMEOUT_S

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        """No per-request log: a scrape every few seconds would fill the journal."""

    def _send(self, status: int, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", CSP)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _text(self, status: int, text: str) -> None:
        self._send(status, (text + "\n").encode(), "text/plain; charset=utf-8")

    def _authorized(self) -> bool:
        if self.server.key is None or key_matches(self.headers.get("Authorization"), self.server.key):
            return True
        challenge = {"WWW-Authenticate": 'Basic realm="sparkfleet view"'}
        self._send(HTTPStatus.UNAUTHORIZED, b"a key is needed (Bearer, or Basic)\n", TEXT, challenge)
        return False

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        if not self._authorized():
            return
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(HTTPStatus.OK, render(self.server.registry), CONTENT_TYPE)
        elif path == "/":
            text = page.render(self.server.refresher.current(), self.server.page_refresh_s)
            self._send(HTTPStatus.OK, text.encode(), "text/html; charset=utf-8")
        elif path.startswith("/lanes/"):
            self._lane_path([unquote(p) for p in path[len("/lanes/") :].split("/")])
        else:
            self._text(HTTPStatus.NOT_FOUND, "not found: /metrics, / and /lanes/<lane>/... are served here")

    do_HEAD = do_GET  # noqa: N815 - stdlib name

    def _not_allowed(self) -> None:
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, b"only GET\n", TEXT, {"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed  # noqa: N815

    def _lane_path(self, parts: list[str]) -> None:
        inv = self.server.refresher.inv
        shown = {v.lane for v in self.server.refresher.current().lanes}
        if inv is None or not parts or not LANE_NAME.fullmatch(parts[0]) or parts[0] not in shown:
            self._text(HTTPStatus.NOT_FOUND, "no such lane")
            return
        lane = inv.lane(parts[0])
        if parts[1:] == ["history"]:
            self._history(inv, lane.name)
        elif len(parts) == 3 and parts[1] == "reports" and REPORT_FILE.fullmatch(parts[2]):
            self._report(lanefiles.reports_dir(lane), parts[2])
        elif len(parts) == 3 and parts[1] == "incidents" and INCIDENT_NAME.fullmatch(parts[2]):
            self._incident(lane.recipe_path.parent / "incidents", lane.name, parts[2])
        else:
            self._text(HTTPStatus.NOT_FOUND, "not found")

    def _history(self, inv: Inventory, lane: str) -> None:
        folder = lanefiles.reports_dir(inv.lane(lane))
        baseline = inv.lane(lane).sections.bench.baseline
        points = lane_history(folder, baseline)
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        text = render_page(lane, points, lambda p: f"/lanes/{lane}/reports/{p.name}", when, baseline)
        self._send(HTTPStatus.OK, text.encode(), "text/html; charset=utf-8")

    def _report(self, folder: Path, name: str) -> None:
        for d in (folder, folder / "failed"):
            path = d / name
            if path.is_file() and not path.is_symlink() and path.stat().st_size <= MAX_FILE_BYTES:
                self._send(HTTPStatus.OK, path.read_bytes(), REPORT_TYPES[name.rsplit(".", 1)[1]])
                return
        self._text(HTTPStatus.NOT_FOUND, "no such report")

    def _incident(self, folder: Path, lane: str, name: str) -> None:
        path = folder / name / "summary.json"
        try:
            if path.is_symlink() or (folder / name).is_symlink():
                raise OSError("a link")
            summary = json.loads(path.read_bytes()[:MAX_FILE_BYTES])
        except (OSError, ValueError, RecursionError):
            self._text(HTTPStatus.NOT_FOUND, "no such incident bundle")
            return
        summary = summary if isinstance(summary, dict) else {"summary": summary}
        self._send(HTTPStatus.OK, page.incident_page(lane, name, summary).encode(), HTML)


def serve(refresher: Refresher, host: str, port: int, key: str | None, page_refresh_s: float) -> ViewServer:
    """Bind the service (the caller runs `serve_forever`)."""
    return ViewServer((host, port), refresher, key, page_refresh_s)
