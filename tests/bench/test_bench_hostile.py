"""A hostile OpenAI server (demo server --hostile MODE): nothing hangs, nothing grows, nothing leaks.

Each mode ends the affected request with one clear error and no numbers, within the deadline the
user gave (--timeout is a whole-request deadline), while steps the mode does not touch keep theirs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import subprocess
import sys
import time

import pytest

from sparkfleet.base.errors import SparkfleetError
from sparkfleet.bench.client import Endpoint, chat_request, discover_model, get_json, stream_chat
from sparkfleet.bench.report import write_report
from sparkfleet.bench.run import BenchSettings, run_bench
from sparkfleet.bench.target import for_url

pytestmark = pytest.mark.slow

QUICK = BenchSettings.quick()
FAST = ("--decode-tps", "5000", "--prefill-tps", "100000")


def sparkfleet(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparkfleet", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_endless_stream_stops_well_past_max_tokens(fake_lane):
    lane = fake_lane("--hostile", "endless")
    endpoint = Endpoint(lane.url, "m", timeout=30)
    started = time.monotonic()
    result = stream_chat(endpoint, chat_request(endpoint, "go", 16))
    assert not result.ok and "kept streaming" in result.error
    assert time.monotonic() - started < 10 and len(result.chunks) <= 2 * 16 + 17


def test_trickle_hits_the_whole_request_deadline(fake_lane):
    lane = fake_lane("--hostile", "trickle")
    endpoint = Endpoint(lane.url, "m", timeout=1.5)
    started = time.monotonic()
    result = stream_chat(endpoint, chat_request(endpoint, "go", 16))
    took = time.monotonic() - started
    assert not result.ok and "1.5 s deadline" in result.error, result.error
    assert 1.4 < took < 10, took  # the trickle never ends by itself


def test_slow_models_is_one_clear_error_within_the_timeout(fake_lane):
    lane = fake_lane("--hostile", "slow-models")
    started = time.monotonic()
    with pytest.raises(SparkfleetError, match="no complete answer within 1 s"):
        discover_model(Endpoint(lane.url, timeout=1))
    assert time.monotonic() - started < 10  # the server would hold it for an hour
    done = sparkfleet("smoke", "--url", lane.url, "--timeout", "1")
    assert done.returncode == 4 and "Traceback" not in done.stderr
    assert "no complete answer within 1 s" in done.stderr and done.stdout == ""


def _peak_rss_mib_of(code: str) -> tuple[str, float]:
    """Run `code` in a fresh interpreter; its last stdout line and its peak RSS.

    The peak is the new process's own VmHWM: getrusage's ru_maxrss survives execve on Linux, so a
    child spawned (vfork) by a large pytest process would report pytest's peak, not its own."""
    hwm = "[int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            code + f"\nprint({hwm})",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    *out, rss = done.stdout.strip().splitlines()
    return "\n".join(out), int(rss) / 1024


def test_a_512_mib_sse_line_is_refused_without_growing(fake_lane):
    lane = fake_lane("--hostile", "huge-line")
    code = (
        "from sparkfleet.bench.client import Endpoint, chat_request, stream_chat\n"
        f"e = Endpoint({lane.url!r}, 'm', timeout=60)\n"
        "print(stream_chat(e, chat_request(e, 'go', 16)).error)"
    )
    error, rss = _peak_rss_mib_of(code)
    assert "SSE line longer than 1 MiB" in error
    assert rss < 200, rss  # the issue saw 1.58 GB


def test_a_400_mb_body_is_refused_without_growing(fake_lane):
    lane = fake_lane("--hostile", "huge-body", "--hostile-bytes", str(400_000_000))
    code = (
        "from sparkfleet.bench.client import Endpoint, discover_model, get_json\n"
        f"e = Endpoint({lane.url!r}, timeout=60)\n"
        "print(get_json(e, '/get_server_info', root=True))\n"
        "try:\n    discover_model(e)\nexcept Exception as exc:\n    print(type(exc).__name__, exc.message)"
    )
    out, rss = _peak_rss_mib_of(code)
    assert out.splitlines()[0] == "None"
    assert "SparkfleetError" in out and "larger than 8 MiB" in out
    assert rss < 200, rss


def test_inflated_usage_fails_that_step_and_prints_no_figure(fake_lane, tmp_path):
    lane = fake_lane("--hostile", "inflated-usage", "--usage", "final", *FAST)
    endpoint = Endpoint(lane.url, "m")
    result = stream_chat(endpoint, chat_request(endpoint, "go on", 64))
    assert not result.ok and "implausible usage: 64000 completion tokens" in result.error
    done = sparkfleet("bench", "--url", lane.url, "--quick", "--out", str(tmp_path), "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["status"] == "failed" and doc["metrics"]["decode_tps"] is None
    assert any("implausible usage" in f for f in doc["failures"])


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("shape-list", "JSON list, not an object"),
        ("shape-choices", "choices is a dict"),
        ("shape-delta", "delta is a str"),
        ("shape-content", "delta.content is a dict"),
        ("shape-usage", "usage is a str"),
    ],
)
def test_valid_json_of_the_wrong_shape_is_a_clean_error(fake_lane, mode, says):
    lane = fake_lane("--hostile", mode)
    endpoint = Endpoint(lane.url, "m")
    result = stream_chat(endpoint, chat_request(endpoint, "go", 8))
    assert not result.ok and result.error.startswith("malformed stream event") and says in result.error


def test_deeply_nested_server_info_costs_only_the_accept_length(fake_lane, tmp_path):
    lane = fake_lane("--hostile", "nested-info", *FAST)
    assert get_json(Endpoint(lane.url), "/get_server_info", root=True) is None
    run = run_bench(for_url(lane.url, tmp_path), QUICK, "nested")
    assert run.status == "ok", run.failures
    assert run.decode_probe.metrics.decode_tps is not None and run.spec_accept is None
    assert write_report(run, tmp_path).json.is_file()


def test_an_echoed_api_key_is_never_printed_or_stored(fake_lane, tmp_path):
    key = "sk-very-secret-0123"
    lane = fake_lane("--hostile", "echo-key", "--api-key", key, *FAST)
    env = {"SPARKFLEET_API_KEY": key}
    smoke = sparkfleet("smoke", "--url", lane.url, env=env)
    assert smoke.returncode == 1 and "<redacted>" in smoke.stdout  # the echo made the answer wrong
    bench = sparkfleet("bench", "--url", lane.url, "--quick", "--out", str(tmp_path), env=env)
    assert "report:" in bench.stdout
    written = "".join(p.read_text(errors="replace") for p in tmp_path.iterdir() if p.suffix != ".png")
    for text in (smoke.stdout, smoke.stderr, bench.stdout, bench.stderr, written):
        assert key not in text
    wrong = sparkfleet("smoke", "--url", lane.url, env={"SPARKFLEET_API_KEY": key + "-wrong"})
    assert key not in wrong.stdout + wrong.stderr and "<redacted>" in wrong.stderr


def test_credentials_in_the_url_are_used_but_never_stored(fake_lane, tmp_path):
    lane = fake_lane(*FAST)
    url = lane.url.replace("http://", "http://ops:hunter2pass@")
    endpoint = Endpoint(url, "m")
    assert "hunter2pass" not in endpoint.base_url and "hunter2pass" not in repr(endpoint)
    assert stream_chat(endpoint, chat_request(endpoint, "What is 2+2?", 8)).ok
    bench = sparkfleet("bench", "--url", url, "--quick", "--out", str(tmp_path))
    written = "".join(p.read_text(errors="replace") for p in tmp_path.iterdir() if p.suffix != ".png")
    assert "report:" in bench.stdout and "hunter2pass" not in bench.stdout + bench.stderr + written


def test_terminal_escapes_from_a_server_are_stripped(fake_lane, tmp_path):
    lane = fake_lane("--hostile", "escapes", *FAST)
    smoke = sparkfleet("smoke", "--url", lane.url)
    assert "\x1b" not in smoke.stdout + smoke.stderr and "\x07" not in smoke.stdout
    assert "deepseek-v4.1-flash" in smoke.stdout
    bench = sparkfleet("bench", "--url", lane.url, "--quick", "--out", str(tmp_path))
    written = "".join(p.read_text(errors="replace") for p in tmp_path.iterdir() if p.suffix != ".png")
    assert "\x1b" not in bench.stdout + bench.stderr + written


@pytest.mark.parametrize("status", ["429", "503"])
def test_overload_statuses_are_errors_not_numbers(fake_lane, status):
    lane = fake_lane("--error-rate", "1", "--fail-status", status)
    endpoint = Endpoint(lane.url, "m")
    result = stream_chat(endpoint, chat_request(endpoint, "go", 8))
    assert not result.ok and result.error.startswith(f"HTTP {status}")


def test_a_redirect_is_not_followed(fake_lane):
    lane = fake_lane("--hostile", "redirect")
    endpoint = Endpoint(lane.url, "m")
    result = stream_chat(endpoint, chat_request(endpoint, "go", 8))
    assert not result.ok and "redirect (not followed)" in result.error
    with pytest.raises(SparkfleetError, match="HTTP 307"):
        discover_model(Endpoint(lane.url))


@pytest.mark.parametrize(
    "bad",
    [
        ("--concurrency", "0"),
        ("--pp", "0"),
        ("--depths", "-1"),
        ("--prompt-tokens", "-5"),
        ("--tg", "-1"),
        ("--runs", "0"),
        ("--timeout", "nan"),
        ("--timeout", "0"),
    ],
)
def test_bad_numeric_options_exit_2_before_any_request(bad, tmp_path):
    # a port nothing listens on: a request would fail differently (and later)
    done = sparkfleet("bench", "--url", "http://127.0.0.1:9/v1", "--quick", "--out", str(tmp_path), *bad)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and bad[0] in done.stderr
    assert not any(tmp_path.iterdir())


def test_smoke_max_tokens_and_timeout_are_validated():
    for bad in (("--max-tokens", "0"), ("--timeout", "-1"), ("--timeout", "inf")):
        done = sparkfleet("smoke", "--url", "http://127.0.0.1:9/v1", *bad)
        assert done.returncode == 2 and bad[0] in done.stderr


def test_redaction_covers_common_secret_names():
    from sparkfleet.lane.spec import redact_env

    env = {
        "HF_TOKEN": "a",
        "GITHUB_TOKEN": "b",
        "MY_SECRET": "c",
        "OPENAI_API_KEY": "d",
        "Authorization": "Bearer e",
        "PROXY_AUTHORIZATION": "f",
        "NCCL_P2P_DISABLE": "1",
    }
    shown = redact_env(env)
    assert shown["NCCL_P2P_DISABLE"] == "1"
    assert all(v == "<redacted>" for k, v in shown.items() if k != "NCCL_P2P_DISABLE"), shown


def test_peak_rss_helper_measures_this_interpreter():
    # guards the RSS assertions above: ru_maxrss is KiB on Linux
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > 1024


def test_chunked_decoding_survives_any_split_and_refuses_garbage():
    from sparkfleet.bench.client import _Dechunk

    body = b"5\r\nhello\r\n1;ext=1\r\n \r\n6\r\nworld!\r\n0\r\n\r\n"
    for step in (1, 2, 3, 7, len(body)):
        d = _Dechunk()
        out = b"".join(d.feed(body[i : i + step]) for i in range(0, len(body), step))
        assert out == b"hello world!" and d.done
    with pytest.raises(Exception, match="bad chunk size"):
        _Dechunk().feed(b"zz\r\n")
    with pytest.raises(Exception, match="longer than 1 KiB"):
        _Dechunk().feed(b"1" * 2000)


def test_quality_output_is_scrubbed_too(fake_lane, tmp_path, monkeypatch):
    from sparkfleet.bench.quality import FailedScenario, QualityResult, QualitySettings

    key = "sk-quality-secret-42"
    lane = fake_lane("--api-key", key, *FAST)
    monkeypatch.setenv("SPARKFLEET_API_KEY", key)

    def echoing_runner(url, model, settings, api_key=None, on_event=None):
        said = f"the model said: your key is {api_key}\x1b]0;owned\x07"
        return QualityResult(
            "failed", "3.0.0", error=said, failed_scenarios=[FailedScenario("TC-01", "fail", 0, said)]
        )

    settings = dataclasses.replace(QUICK, quality=QualitySettings())
    run = run_bench(for_url(lane.url, tmp_path), settings, "quality", quality_runner=echoing_runner)
    text = json.dumps(dataclasses.asdict(run.quality))
    assert key not in text and "\x1b" not in text and "<redacted>" in run.quality.error


def test_credentials_in_a_recipes_bench_url_are_lifted_too(tmp_path):
    from bench_fleet import write_fleet_root

    from sparkfleet.bench.target import for_lane
    from sparkfleet.fleet import inventory

    name = write_fleet_root(tmp_path, 30000, bench='[bench]\nurl = "http://ops:pa55word@10.0.0.9:8000/v1"\n')
    target = for_lane(inventory.load(tmp_path), name)
    assert target.url == "http://10.0.0.9:8000/v1" and "pa55word" not in repr(target)
    assert target.endpoint(None, 5).basic_auth.startswith("Basic ")


def test_usage_plausibility_rules():
    from sparkfleet.bench.client import Chunk, StreamResult, implausible_usage

    def result(texts, completion, prompt=10, cached=None):
        r = StreamResult(started=0.0, chunks=[Chunk(0.0, t, None) for t in texts])
        r.usage = {"prompt_tokens": prompt, "completion_tokens": completion}
        if cached is not None:
            r.usage["prompt_tokens_details"] = {"cached_tokens": cached}
        return r

    assert implausible_usage(result(["a b", " c"], 3), 64) is None
    assert "for max_tokens 64" in implausible_usage(result(["a"] * 3, 64000), 64)
    assert "bytes of text" in implausible_usage(result(["ab"], 40), 64)  # 40 tokens from 2 bytes
    assert "chunks of text" in implausible_usage(result(["a"] * 20, 3), 64)  # 20 chunks, 3 tokens
    assert "cached of" in implausible_usage(result(["a"], 1, prompt=10, cached=11), 64)
