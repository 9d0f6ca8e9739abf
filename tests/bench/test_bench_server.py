"""The demo OpenAI server speaks the protocol and keeps the flags the launcher relies on."""

from __future__ import annotations

import json
import signal
import time

import pytest

from sparkfleet.bench.client import Endpoint, chat_request, get, get_json, stream_chat
from sparkfleet.demo.openai_server import READY_LINE

pytestmark = pytest.mark.slow


def test_boot_health_signatures_and_ready_line(fake_lane):
    lane = fake_lane(
        "--boot-delay",
        "1.2",
        "--signature",
        "Load weight end. elapsed=1",
        "--signature",
        "Capture cuda graph end.",
        ready=False,
    )
    assert lane.health() == 503
    lane.wait_ready()
    deadline = time.monotonic() + 2
    while READY_LINE not in lane.lines and time.monotonic() < deadline:
        time.sleep(0.02)
    assert lane.lines[1:] == ["Load weight end. elapsed=1", "Capture cuda graph end.", READY_LINE]
    assert lane.health() == 200


def test_omit_ready_line_still_serves(fake_lane):
    lane = fake_lane("--boot-delay", "0.2", "--signature", "one", "--omit-ready-line")
    time.sleep(0.1)
    assert lane.lines[1:] == ["one"]
    assert lane.health() == 200


def test_exit_during_boot(fake_lane):
    lane = fake_lane(
        "--boot-delay",
        "0.6",
        "--signature",
        "a",
        "--signature",
        "b",
        "--signature",
        "c",
        "--exit-during-boot",
        ready=False,
    )
    assert lane.proc.wait(10) == 1
    assert READY_LINE not in lane.lines
    assert "a" in lane.lines and "c" not in lane.lines


def test_arithmetic_answers_usage_and_models(fake_lane):
    lane = fake_lane("--usage", "final")
    endpoint = Endpoint(lane.url, "deepseek-v4.1-flash")
    status, body = get(endpoint, "/models")
    assert status == 200 and json.loads(body)["data"][0]["id"] == "deepseek-v4.1-flash"
    result = stream_chat(endpoint, chat_request(endpoint, "What is 127*89? Answer with the number only.", 16))
    assert result.ok and result.text == "11303" and result.finish_reason == "stop"
    assert result.usage["prompt_tokens"] == 8 and result.usage["completion_tokens"] == 1
    words = stream_chat(endpoint, chat_request(endpoint, "tell me a story please", 7))
    assert words.ok and len(words.text.split()) == 7 and words.finish_reason == "length"
    assert words.usage["completion_tokens"] == 7 and not words.continuous_usage


def test_continuous_usage_only_when_asked(fake_lane):
    lane = fake_lane("--usage", "continuous", "--tokens-per-chunk", "3")
    endpoint = Endpoint(lane.url, "m")
    result = stream_chat(endpoint, chat_request(endpoint, "go on", 10))
    assert result.continuous_usage
    assert [c.usage_completion_tokens for c in result.chunks] == [3, 6, 9, 10]
    plain = dict(chat_request(endpoint, "go on", 10), stream_options={"include_usage": True})
    again = stream_chat(endpoint, plain)
    assert not again.continuous_usage and again.usage["completion_tokens"] == 10


def test_usage_none(fake_lane):
    lane = fake_lane("--usage", "none")
    endpoint = Endpoint(lane.url, "m")
    result = stream_chat(endpoint, chat_request(endpoint, "go on", 5))
    assert result.ok and result.usage is None


def test_drop_after_is_seen_as_a_dropped_stream(fake_lane):
    lane = fake_lane("--drop-after", "4")
    endpoint = Endpoint(lane.url, "m")
    result = stream_chat(endpoint, chat_request(endpoint, "go on", 50))
    assert not result.ok
    assert "dropped" in result.error or "broken" in result.error
    assert len(result.chunks) == 3  # the opening role chunk + 3 content chunks


def test_error_rate_and_fail_status(fake_lane):
    lane = fake_lane("--error-rate", "1", "--fail-status", "503")
    endpoint = Endpoint(lane.url, "m")
    result = stream_chat(endpoint, chat_request(endpoint, "go on", 5))
    assert not result.ok and result.status == 503 and "injected failure" in result.error


def test_api_key_required(fake_lane):
    lane = fake_lane("--api-key", "s3cret-key")
    assert stream_chat(Endpoint(lane.url, "m"), chat_request(Endpoint(lane.url, "m"), "hi", 2)).status == 401
    keyed = Endpoint(lane.url, "m", api_key="s3cret-key")
    assert stream_chat(keyed, chat_request(keyed, "hi", 2)).ok
    assert "s3cret-key" not in repr(keyed)


def test_server_info_and_metrics(fake_lane):
    lane = fake_lane("--tokens-per-chunk", "3", "--first-chunk-alone")
    endpoint = Endpoint(lane.url, "m")
    stream_chat(endpoint, chat_request(endpoint, "hi there", 4))
    info = get_json(endpoint, "/get_server_info", root=True)
    assert (
        info["internal_states"][0]["avg_spec_accept_length"] == 3.0
    )  # the prefill token, then one step of 3
    status, body = get(endpoint, "/metrics", root=True)
    text = body.decode()
    assert status == 200 and 'sglang:generation_tokens_total{model_name="deepseek-v4.1-flash"} 4' in text


def test_prefix_cache_reports_cached_tokens(fake_lane):
    lane = fake_lane()
    endpoint = Endpoint(lane.url, "m")
    prompt = " ".join(f"w{i}" for i in range(40))
    first = stream_chat(endpoint, chat_request(endpoint, prompt, 2))
    second = stream_chat(endpoint, chat_request(endpoint, prompt, 2))
    assert first.cached_tokens == 0 and second.cached_tokens == 32  # two 16-word blocks


def test_sigterm_exits_cleanly(fake_lane):
    lane = fake_lane()
    lane.proc.send_signal(signal.SIGTERM)
    assert lane.proc.wait(5) == 0


def test_reasoning_is_timed_and_counted_but_not_the_answer(fake_lane):
    lane = fake_lane("--reasoning-tokens", "20", "--tokens-per-chunk", "3", "--usage", "continuous")
    endpoint = Endpoint(lane.url, "m")
    result = stream_chat(endpoint, chat_request(endpoint, "What is 127*89? Answer with the number only.", 64))
    assert result.ok and result.text == "11303" and result.finish_reason == "stop"
    assert result.usage["completion_tokens"] == 21 and result.chunks[0].reasoning
    assert len(result.output_text.split()) == 21
    cut = stream_chat(endpoint, chat_request(endpoint, "What is 19+23?", 10))
    assert cut.text == "" and cut.finish_reason == "length"  # thinking ate the budget


def test_speculative_plans_send_the_prefill_token_alone_then_whole_steps():
    from sparkfleet.demo.openai_server import spec_plan

    assert spec_plan(10, [3]) == [(0, 1), (1, 4), (4, 7), (7, 10)]
    assert spec_plan(6, [1, 5]) == [(0, 1), (1, 2), (2, 6)]
    # a step stops at the end of the reasoning unless the server mixes them (vLLM's delta)
    assert spec_plan(8, [3], split_at=3) == [(0, 1), (1, 3), (3, 6), (6, 8)]
    assert spec_plan(8, [3], split_at=3, crossing=True) == [(0, 1), (1, 4), (4, 7), (7, 8)]
    assert spec_plan(0, [3]) == []


def test_stream_shapes_on_the_wire(fake_lane):
    lane = fake_lane("--accept-range", "1-5", "--first-chunk-alone", "--no-role-chunk", "--no-cache-report")
    endpoint = Endpoint(lane.url, "m")
    result = stream_chat(endpoint, chat_request(endpoint, "tell me more", 60, ignore_eos=True))
    assert result.ok and len(result.chunks[0].content.split()) == 1  # the prefill token alone
    sizes = [len(c.content.split()) for c in result.chunks[1:]]
    assert sum(sizes) == 59 and max(sizes) <= 5 and len(set(sizes)) > 1  # variable acceptance
    assert "prompt_tokens_details" not in result.usage and result.cached_tokens is None
