"""A user of the gateway attacks its trust boundary: every admin path, as a user, through the real
nginx front and smg (smg 1.13.0), over a real demo lane.

The oracle is written here, not read from the gateway: a request is bad when the path it names is
one of smg's admin or worker routes (smg's router: `/workers`, `/workers/{worker_id}`,
`/v1/tokenizers...`, `/flush_cache`, `/get_loads`, `/wasm`, `/parse/...`; and `/ha/shutdown`, which
an HA build of smg routes and this one does not) or a spelling of one that nginx and
smg may read differently (`..`, `%2F`, doubled slashes). Refused means: not a 2xx from an admin
handler, and afterwards smg holds exactly the inventory's worker and a foreign listener, offered as
a worker, was never called (with the gateway's key or without). Each case is counted per path.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from .surfaces import gateway_routes
from .tally import bad_input

try:
    from support.localgateway import MODEL, chat_body, foreign_listener, local_gateway, request
except ImportError:  # tests/ imported as a package
    from tests.support.localgateway import MODEL, chat_body, foreign_listener, local_gateway, request

# one worker with the other modules that start local lanes and gateways (their ports)
pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("local_lanes")]

INFERENCE_OK = {200}
REFUSED = {401, 403, 404, 405}


@pytest.fixture
def gw(tmp_path):
    yield from local_gateway(tmp_path)


@pytest.fixture
def listener():
    yield from foreign_listener()


def _admin_cases(foreign: str, worker_id: str) -> list[tuple[str, str, str, object]]:
    """(surface, method, path, body): admin and worker routes of smg, and spellings of them."""
    spec = {"url": foreign, "model_id": "evil-model"}
    patch = {"priority": 9, "api_key": "x" * 20}
    return [
        ("POST /workers", "POST", "/workers", spec),
        ("GET /workers", "GET", "/workers", None),
        ("GET /workers/{worker_id}", "GET", f"/workers/{worker_id}", None),
        ("PUT /workers/{worker_id}", "PUT", f"/workers/{worker_id}", spec),
        ("PATCH /workers/{worker_id}", "PATCH", f"/workers/{worker_id}", patch),
        ("DELETE /workers/{worker_id}", "DELETE", f"/workers/{worker_id}", None),
        ("POST /v1/tokenizers", "POST", "/v1/tokenizers", {"name": "t", "source": "/etc"}),
        ("GET /v1/tokenizers", "GET", "/v1/tokenizers", None),
        ("POST /flush_cache", "POST", "/flush_cache", {}),
        ("GET /get_loads", "GET", "/get_loads", None),
        ("POST /wasm", "POST", "/wasm", {"modules": []}),
        ("POST /parse/function_call", "POST", "/parse/function_call", {"text": "", "tool_call_parser": "x"}),
        ("POST /ha/shutdown", "POST", "/ha/shutdown", {}),
        # spellings: what nginx normalizes and smg may not, and the other way round
        ("POST /workers", "POST", "//workers", spec),
        ("POST /workers", "POST", "/v1/chat/completions/../../workers", spec),
        ("POST /workers", "POST", "/v1/%2e%2e/workers", spec),
        ("DELETE /workers/{worker_id}", "DELETE", f"/v1/models/..%2F..%2Fworkers/{worker_id}", None),
        ("DELETE /workers/{worker_id}", "DELETE", f"/workers/{worker_id}/../../v1/models", None),
        ("GET /workers/{worker_id}", "GET", f"/workers/{worker_id}%2F..%2F..%2Fv1%2Fmodels", None),
        ("POST /v1/tokenizers", "POST", "/v1/chat/completions/..%2F..%2Fv1/tokenizers",
         {"name": "t", "source": "/"}),
    ]


@pytest.mark.surface(
    "http:gateway POST /workers", "http:gateway GET /workers", "http:gateway GET /workers/{worker_id}",
    "http:gateway PUT /workers/{worker_id}", "http:gateway PATCH /workers/{worker_id}",
    "http:gateway DELETE /workers/{worker_id}",
    "http:gateway POST /v1/tokenizers", "http:gateway GET /v1/tokenizers", "http:gateway POST /flush_cache",
    "http:gateway GET /get_loads", "http:gateway POST /wasm", "http:gateway POST /parse/function_call",
    "http:gateway POST /v1/chat/completions",
)  # fmt: skip
def test_a_user_key_reaches_the_inference_api_only_and_never_lends_the_gateway_key(gw, listener, figures):
    from sparkfleet.serving import gateway

    alice, _ = gateway.add_user(gw.state, "alice")
    lane = gw.lane_url

    # the attack that captured the gateway key: register a listener as a worker, then ask for its model
    ans = request(f"{gw.url}/workers", alice, "POST", {"url": listener.url})
    bad_input(figures, "http:gateway POST /workers", ans.status in REFUSED)
    assert ans.status in REFUSED, (ans.status, ans.body[:300])
    time.sleep(2.5)  # smg's health check interval is 1 s: a registered worker would be in by now
    ans = request(f"{gw.url}/v1/chat/completions", alice, "POST", chat_body("evil-model"))
    assert ans.status != 200 and listener.seen == [], (ans.status, listener.seen)

    (worker_id,) = [w for w in _worker_ids(gw)]
    for who, key in (("user", alice), ("operator's inference key", gw.key)):
        for surface, method, path, body in _admin_cases(listener.url, worker_id):
            ans = request(f"{gw.url}{path}", key, method, body)
            served_by_admin = ans.status is not None and 200 <= ans.status < 300 and not _is_models_list(ans)
            bad_input(figures, f"http:gateway {surface}", not served_by_admin)
            assert not served_by_admin, (who, method, path, ans.status, ans.body[:300])
            assert ans.status in REFUSED | INFERENCE_OK, (who, method, path, ans.status)

    time.sleep(2.5)
    assert gw.workers() == {lane}  # smg holds the inventory's worker, nothing added or removed
    assert listener.seen == [], listener.seen  # never called: neither the gateway's key nor any other
    # smg itself refuses the gateway's key on its admin routes: an nginx slip could not lend it either
    router = f"http://127.0.0.1:{gateway.load_record(gw.state).router_port}"
    assert request(f"{router}/workers", gw.key, "POST", {"url": listener.url}).status == 401
    assert request(f"{router}/workers", gw.key).status == 401

    # the inference API still answers the user, and the operator's key
    for key in (alice, gw.key):
        ans = request(f"{gw.url}/v1/chat/completions", key, "POST", chat_body())
        assert ans.status == 200 and ans.headers.get(gateway.ROUTED_HEADER) == lane, ans.status
        ans = request(f"{gw.url}/v1/models", key)
        assert ans.status == 200 and [m["id"] for m in ans.json()["data"]] == [MODEL]


def _is_models_list(ans) -> bool:
    """A spelling that nginx normalizes to /v1/models is answered as /v1/models: the model list."""
    try:
        body = ans.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("object") == "list" and "workers" not in body


def _worker_ids(gw) -> list[str]:
    from sparkfleet.serving import gateway

    rec = gateway.load_record(gw.state)
    ans = request(f"http://127.0.0.1:{rec.router_port}/workers", gw.admin_key())
    return [w["id"] for w in ans.json()["workers"]]


@pytest.mark.surface(
    "http:gateway GET /workers", "http:gateway DELETE /workers/{worker_id}", "http:gateway POST /workers"
)
def test_the_operators_admin_key_opens_admin_paths_and_nothing_adds_a_worker(gw, listener, figures):
    from sparkfleet.serving import gateway

    admin = gw.admin_key()
    assert admin not in (gw.key,) and len(admin) >= 32
    ans = request(f"{gw.url}/workers", admin)
    assert ans.status == 200 and [w["url"] for w in ans.json()["workers"]] == [gw.lane_url], ans.body[:300]
    assert request(f"{gw.url}/get_loads", admin).status == 200
    # the admin key is not an inference key (it is never handed to a client of the API)
    assert request(f"{gw.url}/v1/chat/completions", admin, "POST", chat_body()).status == 401
    # workers come from the inventory: not even the operator's admin key adds one at the front
    ans = request(f"{gw.url}/workers", admin, "POST", {"url": listener.url})
    bad_input(figures, "http:gateway POST /workers", ans.status == 403)
    assert ans.status == 403 and b"inventory" in ans.body, (ans.status, ans.body[:300])
    time.sleep(2.5)
    assert gw.workers() == {gw.lane_url} and listener.seen == []

    # and the admin key removes one (operator admin still works): the gateway then has no worker
    (worker_id,) = _worker_ids(gw)
    ans = request(f"{gw.url}/workers/{worker_id}", admin, "DELETE")
    assert ans.status in (200, 202), (ans.status, ans.body[:300])
    deadline = time.monotonic() + 15
    while gw.workers():
        assert time.monotonic() < deadline, gw.workers()
        time.sleep(0.2)
    assert gateway.admin_key(gw.state) == admin  # one key per gateway state, made once, 0600
    admin_file = Path(gateway.status(gw.state)["admin_key_file"])  # where `gateway status` says it is
    assert admin_file.read_text().strip() == admin and admin_file.stat().st_mode & 0o777 == 0o600


# The paths an OpenAI client uses, which SECURITY.md opens to a user's key (and the gateway key):
# this test's own list, not the front's. Every other route smg has is the operator's.
USER_ROUTES = {("POST", "/v1/chat/completions"), ("POST", "/v1/completions"), ("POST", "/v1/embeddings"),
               ("GET", "/v1/models")}  # fmt: skip
ROUTES = [(m, p) for m, p in gateway_routes() if m != "*"]


@pytest.mark.surface(*[f"http:gateway {m} {p}" for m, p in ROUTES])
def test_every_route_is_refused_without_a_key_and_beyond_the_inference_api(gw, figures):
    """Each route smg has (surfaces.SMG_ROUTES), asked at the public port: without a key or with
    one the gateway never issued, 401 from the front; with a user's key or the gateway key, any
    route outside the inference API is refused too (401/403), whatever smg would have answered."""
    from sparkfleet.serving import gateway

    alice, _ = gateway.add_user(gw.state, "alice")
    stranger = "sk-sf-" + "s" * 40
    for method, path in ROUTES:
        url = gw.url + re.sub(r"\{[^}]*\}", "sf-probe", path)
        body = None if method == "GET" else {}
        callers = [("no key", None), ("a key never issued", stranger)]
        if (method, path) not in USER_ROUTES:
            callers += [("a user", alice), ("the gateway key", gw.key)]
        for who, key in callers:
            status = request(url, key, method, body).status
            refused = status == 401 if who in ("no key", "a key never issued") else status in (401, 403)
            bad_input(figures, f"http:gateway {method} {path}", refused)
            assert refused, (who, method, path, status)
    assert gw.workers() == {gw.lane_url}  # nothing a refused request sent reached smg's admin API
