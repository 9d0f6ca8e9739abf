"""The real gateway (nginx front + smg) over one real demo lane on this machine, without fleet hosts.

The lane's server (`sparkfleet.demo.openai_server`) is started directly with the gateway's key on a
loopback port; the inventory names one host at 127.0.0.1 (a LocalHost: `gateway up` installs the
key through the real agent, locally) whose lane has that port and a `[gateway]` table. The gateway
and the lane are stopped in the fixture's teardown even when the test fails. For tests that attack
the gateway itself (its paths, its keys), where the netns fleet of tests/serving/test_gateway.py
would only add minutes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from sparkfleet.base.http import free_port
from sparkfleet.fleet import inventory
from sparkfleet.remote.nodecall import call_agent
from sparkfleet.serving import gateway

try:
    from support.lanefleet import lane_recipe, write_fleet
except ImportError:  # tests/ imported as a package
    from tests.support.lanefleet import lane_recipe, write_fleet

MODEL = "deepseek-v4.1-flash"
LANE = "gw-lane"
HOST = "gw1"


@dataclass
class Answer:
    status: int | None
    body: bytes
    headers: dict[str, str]

    def json(self):
        return json.loads(self.body or b"null")


def request(
    url: str, key: str | None, method: str = "GET", body: object = None, timeout: float = 30
) -> Answer:
    """One HTTP request; any status is an answer (None: nothing answered)."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if data is not None else {}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return Answer(resp.status, resp.read(), dict(resp.headers))
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, exc.read(), dict(exc.headers))
    except (urllib.error.URLError, OSError):
        return Answer(None, b"", {})


def chat_body(model: str = MODEL) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "What is 19+23?"}], "max_tokens": 4}


@dataclass
class LocalGateway:
    inv: inventory.Inventory
    state: Path
    url: str  # the front: http://127.0.0.1:PORT (no /v1)
    key: str  # the gateway's key (the lane's, the operator's inference key)
    lane_url: str
    lane: subprocess.Popen

    def admin_key(self) -> str:
        return gateway.admin_key(self.state)

    def workers(self) -> set[str]:
        """The worker URLs smg holds now, asked with the operator's admin key on smg's own port."""
        rec = gateway.load_record(self.state)
        ans = request(f"http://127.0.0.1:{rec.router_port}/workers", self.admin_key())
        assert ans.status == 200, (ans.status, ans.body[:300])
        return {w["url"] for w in ans.json()["workers"]}


def start_lane(port: int, key: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "sparkfleet.demo.openai_server", "--host", "127.0.0.1",
            "--port", str(port), "--served-model-name", MODEL, "--api-key-env", "SPARKFLEET_API_KEY",
            "--decode-tps", "4000"]  # fmt: skip
    proc = subprocess.Popen(argv, env={"PATH": "/usr/bin:/bin", "SPARKFLEET_API_KEY": key},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 30
    while request(f"http://127.0.0.1:{port}/health", None, timeout=2).status != 200:
        assert proc.poll() is None and time.monotonic() < deadline, "the demo lane did not start"
        time.sleep(0.1)
    return proc


def write_gateway_fleet(root: Path, lane_port: int, state_dir: Path) -> inventory.Inventory:
    launch = f"""
[world]
tp = 1

[launch]
runtime = "process"
port = {lane_port}
served_model_name = "{MODEL}"
fabric = "none"
command = ["{sys.executable}", "-m", "sparkfleet.demo.openai_server", "--port", "{{port}}"]
ready_signatures = ["The server is fired up and ready to roll!"]

[gateway]
"""
    hosts = {HOST: {"address": "127.0.0.1", "ssh_user": "root", "local_hub": str(root / "hub"),
                    "nas_hub": str(root / "nas"), "state_dir": str(state_dir)}}  # fmt: skip
    return inventory.load(write_fleet(root / "fleet", hosts, {LANE: lane_recipe([HOST], extra=launch)}))


def local_gateway(tmp: Path) -> Iterator[LocalGateway]:
    """A generator for a fixture: the gateway up over one demo lane; both stopped afterwards."""
    state = tmp / "gw"
    key = gateway.gateway_key(state)
    lane_port = free_port()
    inv = write_gateway_fleet(tmp, lane_port, tmp / "host-state")
    lane = start_lane(lane_port, key)
    try:
        port = free_port()
        st = gateway.up(inv, state, call_agent, bind="127.0.0.1", port=port, metrics_port=free_port())
        assert st["running"] and st["models"] == [MODEL], st
        yield LocalGateway(inv, state, f"http://127.0.0.1:{port}", key, f"http://127.0.0.1:{lane_port}", lane)
    finally:
        gateway.down(state)
        lane.terminate()
        lane.wait(10)


@dataclass
class Listener:
    """A foreign HTTP listener that answers like a worker and records every request's headers."""

    port: int
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)  # (method, path, headers)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def keys_seen(self) -> set[str]:
        return {h.get("Authorization", "") for _m, _p, h in self.seen}


def foreign_listener() -> Iterator[Listener]:
    """A generator for a fixture: a listener serving "evil-model"; stopped afterwards."""
    listener = Listener(free_port())

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            listener.seen.append((self.command, self.path, dict(self.headers)))
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            if self.path.startswith("/v1/models"):
                body = {"object": "list", "data": [{"id": "evil-model", "object": "model"}]}
            elif self.path.startswith("/get_server_info") or self.path.startswith("/get_model_info"):
                body = {"model_path": "evil-model", "served_model_name": "evil-model"}
            else:
                answer = {"role": "assistant", "content": "captured"}
                body = {"id": "x", "object": "chat.completion",
                        "choices": [{"index": 0, "message": answer, "finish_reason": "stop"}]}  # fmt: skip
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _answer  # noqa: N815 - stdlib names

        def log_message(self, *_a) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", listener.port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield listener
    finally:
        server.shutdown()
        server.server_close()
