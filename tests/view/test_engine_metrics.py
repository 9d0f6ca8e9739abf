"""The demo server serves /metrics without the lane's key, as vLLM does (its key guards /v1 paths
only: vllm/entrypoints/serve/middleware/authenticate.py GUARDED_PREFIX), so Prometheus can scrape
every lane's engine from the file_sd targets `sparkfleet view targets` writes."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request

import pytest

from sparkfleet.demo.openai_server import FakeLaneServer, parse_args


@pytest.fixture
def keyed_server():
    args = ["--host", "127.0.0.1", "--port", "0", "--api-key", "sk-secret-key-1"]
    server = FakeLaneServer(parse_args(args))
    server.state.ready = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_metrics_answer_without_the_key_and_v1_still_needs_it(keyed_server):
    with urllib.request.urlopen(keyed_server + "/metrics", timeout=5) as resp:
        assert resp.status == 200
        assert b"generation_tokens_total" in resp.read()
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(keyed_server + "/v1/models", timeout=5)
    assert err.value.code == 401
