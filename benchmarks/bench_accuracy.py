"""Every shape side by side: sparkfleet's bench vs llama-benchy 0.4.0 vs the truth, in one run.

The truth is the demo OpenAI server (sleep-paced; its rates are configured, its speculative steps
counted), streaming the ways SGLang and vLLM really do:
- decode: tg128 after a 487-token prompt on 1 token/chunk, 3/chunk and variable acceptance (1-5
  per step) — the prefill token alone first — each with continuous usage and with only a final
  usage record, each with and without a role-only first chunk (12 shapes);
- prefill: pp512 @ d4096 with prefix caching on, cached_tokens reported and not reported, and a
  pp128 @ d0 behind 8 ms of per-request overhead (what made --quick read ~7 % low);
- speculative accept length of this run: vLLM counters and SGLang's per-rank gauge, each after
  100,000 earlier steps at another acceptance (the lifetime average is shown for contrast);
- client CPU as a share of measured decode time at 100 tok/s.
llama-benchy needs a tokenizer and downloads a book; both are made here and served from loopback
(a word-level tokenizer.json matching the demo server's token = word rule, a generated text). Its
book cache goes to a temporary HOME. Prints one JSON line. If llama-benchy cannot run, the line
says why (field "llama_benchy.reason") and still carries our numbers.

    .venv/bin/python benchmarks/bench_accuracy.py [--decode-tps 400] [--runs 3] [--skip-benchy]
    .venv/bin/python benchmarks/bench_accuracy.py --smoke   # seconds: the script itself cannot rot

A real engine too: `--engine-venv .venv-vllm` builds the tiny Qwen2 and serves it with
vLLM's CPU build (or `--engine-url` names a running server and `--engine-tokenizer` its model
folder); sparkfleet (request by request), `vllm bench serve` and llama-benchy 0.4.0 then each run
on it, held to the engine's own counters over their own windows (`engine` in the JSON line;
`--engine-only` for that section alone).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from sparkfleet.bench.client import Endpoint, chat_request, get_json, stream_chat
from sparkfleet.bench.metrics import measure
from sparkfleet.bench.probes import (
    DecodeProbe,
    client_round_trip,
    cold_prefill_rate,
    run_decode_probe,
    run_pp,
    run_tg,
    within_ceiling,
)
from sparkfleet.bench.prompts import make_prompt
from sparkfleet.bench.spec_decode import SpecSampler, read_metrics
from sparkfleet.demo.openai_server import VOCAB
from sparkfleet.demo.tinyqwen import build_tiny_qwen
from sparkfleet.demo.vllm_engine import engine_ready, start_engine
from sparkfleet.remote.hosts import stop_process

PROMPT_TOKENS, TG = 487, 128
DEMO_DECODE_TIME = "sparkfleet_demo:request_decode_time_seconds_sum"  # the demo's own first-to-last write
BOOK_WORDS = (
    "the",
    "fleet",
    "of",
    "small",
    "machines",
    "hums",
    "in",
    "rack",
    "while",
    "weights",
    "stream",
    "from",
    "local",
    "disks",
    "and",
    "every",
    "node",
    "keeps",
    "its",
    "own",
    "copy",
    "shards",
    "so",
    "decode",
    "never",
    "waits",
    "on",
    "network",
)


class QuietFiles(SimpleHTTPRequestHandler):
    """Serves the book; keeps stdout and stderr for the one JSON line."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass


def start_fake_lane(*flags: str) -> tuple[subprocess.Popen, str]:
    argv = [sys.executable, "-u", "-m", "sparkfleet.demo.openai_server", "--port", "0", *flags]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    port = int(first.split("http://", 1)[1].split()[0].rsplit(":", 1)[1])
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # drain stdout
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 15
    while get_json(Endpoint(url), "/health", root=True) is None:  # like a launcher: wait for 200
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("the demo server did not become ready")
        time.sleep(0.02)
    return proc, url


def stop(proc: subprocess.Popen) -> None:
    stop_process(proc)


def make_tokenizer(folder: Path, words: set[str]) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(sorted(words))}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "model_max_length": 1 << 20}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def cpu_seconds(who: int = resource.RUSAGE_SELF) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def pct(value: float | None, truth: float) -> float | None:
    return None if value is None else round((value - truth) / truth * 100, 3)


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


class Benchy:
    """llama-benchy 0.4.0 run offline against a local server, its book and tokenizer from loopback."""

    def __init__(self, work: Path, skip: bool) -> None:
        self.work = work
        self.reason: str | None = "skipped (--skip-benchy)" if skip else None
        self.version: str | None = None
        self.exe = shutil.which("llama-benchy", path=str(Path(sys.executable).parent)) or shutil.which(
            "llama-benchy"
        )
        if self.exe is None and self.reason is None:
            self.reason = "llama-benchy is not installed (pip install llama-benchy==0.4.0)"
        rng = random.Random(7)
        (work / "book.txt").write_text(" ".join(rng.choice(BOOK_WORDS) for _ in range(40000)))
        if self.reason is None:
            try:
                make_tokenizer(work / "tokenizer", set(BOOK_WORDS) | set(VOCAB))
            except ImportError as exc:
                self.reason = f"no tokenizers package to build a local tokenizer: {exc}"
        self.books = ThreadingHTTPServer(("127.0.0.1", 0), partial(QuietFiles, directory=str(work)))
        threading.Thread(target=self.books.serve_forever, daemon=True).start()
        self.book_url = f"http://127.0.0.1:{self.books.server_address[1]}/book.txt"

    def close(self) -> None:
        self.books.shutdown()
        self.books.server_close()

    def run(
        self,
        url: str,
        runs: int,
        pp: int,
        tg: int,
        depth: int = 0,
        model: str = "deepseek-v4.1-flash",
        tokenizer: Path | None = None,
    ) -> dict:
        """{"pp_tps", "tg_tps"} of the measured (not the context-prefill) phase, or {"error"}."""
        if self.reason:
            return {"error": self.reason}
        result = self.work / "benchy.json"
        result.unlink(missing_ok=True)
        argv = [
            self.exe, "--base-url", url, "--model", "local/wordlevel",
            "--served-model-name", model, "--tokenizer", str(tokenizer or self.work / "tokenizer"),
            "--book-url", self.book_url, "--pp", str(pp), "--tg", str(tg), "--runs", str(runs),
            "--exact-tg", "--latency-mode", "generation", "--skip-coherence", "--format", "json",
            "--save-result", str(result),
        ]  # fmt: skip
        if depth:
            argv += ["--depth", str(depth), "--enable-prefix-caching"]
        env = {
            **os.environ,
            "HOME": str(self.work),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "NO_PROXY": "127.0.0.1,localhost",
        }
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, cwd=self.work)
        if done.returncode != 0 or not result.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return {"error": f"exit {done.returncode}: {' | '.join(tail)}"[:300]}
        doc = json.loads(result.read_text())
        self.version = doc.get("version")
        measured = [b for b in doc["benchmarks"] if not b.get("is_context_prefill_phase")][-1]
        tg_stats, pp_stats = measured.get("tg_throughput"), measured.get("pp_throughput")
        return {
            "pp_tps": pp_stats["mean"] if pp_stats else None,
            "tg_tps": tg_stats["mean"] if tg_stats else None,
            "ttfr_ms": (measured.get("ttfr") or {}).get("mean"),
        }


STEPS = {
    "1/chunk": ("--tokens-per-chunk", "1"),
    "3/chunk": ("--tokens-per-chunk", "3", "--first-chunk-alone"),
    "accept 1-5": ("--accept-range", "1-5", "--first-chunk-alone"),
}


def decode_cases(truth: float, runs: int, benchy: Benchy, only_first: bool) -> list[dict]:
    cases = []
    for steps, flags in STEPS.items():
        for usage in ("continuous", "final"):
            for role in (True, False):
                shape = [*flags, "--usage", usage, "--decode-tps", str(truth), "--prefill-tps", "20000"]
                if not role:
                    shape.append("--no-role-chunk")
                proc, url = start_fake_lane(*shape)
                try:
                    endpoint = Endpoint(url, "deepseek-v4.1-flash")
                    assert stream_chat(endpoint, chat_request(endpoint, "warm up", 4)).ok
                    rates, served, source = [], [], None
                    for i in range(runs):
                        before = read_metrics(endpoint)[DEMO_DECODE_TIME][0]
                        m = run_decode_probe(endpoint, DecodeProbe(PROMPT_TOKENS, TG), f"sf-acc-{i}").metrics
                        took = read_metrics(endpoint)[DEMO_DECODE_TIME][0] - before
                        if not m.ok or m.decode_tps is None:
                            raise SystemExit(f"our probe failed on {steps}/{usage}: {m.error}")
                        rates.append(m.decode_tps)
                        # what the server really served: the tokens after the first chunk (one, in
                        # every STEPS shape) over its own first-to-last write (a sleep-paced
                        # schedule slips late on a loaded box, never early)
                        served.append(m.decode_tps / ((m.completion_tokens - 1) / took))
                        source = m.token_source
                    theirs = benchy.run(url, runs, PROMPT_TOKENS, TG)
                finally:
                    stop(proc)
                case = {
                    "shape": f"{steps}, {usage} usage, {'role chunk' if role else 'no role chunk'}",
                    "ours_tps": round(mean(rates), 3),
                    "ours_error_pct": pct(mean(rates), truth),
                    "ours_vs_served_worst_pct": round(max(abs(r - 1) for r in served) * 100, 3),
                    "ours_token_source": source,
                }
                if "error" in theirs:
                    case["llama_benchy"] = theirs["error"]
                else:
                    case["llama_benchy_tps"] = round(theirs["tg_tps"], 3)
                    case["llama_benchy_error_pct"] = pct(theirs["tg_tps"], truth)
                cases.append(case)
                if only_first:
                    return cases
    return cases


PREFILL = 5000.0
PREFILL_CASES = (
    ("pp512 @ d4096, cached_tokens reported", 512, 4096, ("--overhead-ms", "4")),
    ("pp512 @ d4096, cached_tokens not reported", 512, 4096, ("--overhead-ms", "4", "--no-cache-report")),
    ("pp128 @ d0, 8 ms per-request overhead", 128, 0, ("--overhead-ms", "8", "--no-cache-report")),
)


def prefill_cases(runs: int, benchy: Benchy) -> list[dict]:
    cases, seq = [], itertools.count()

    def prefix() -> str:
        return f"sf-pp-{next(seq)}"

    for name, pp, depth, flags in PREFILL_CASES:
        proc, url = start_fake_lane("--prefill-tps", str(PREFILL), "--decode-tps", "2000", *flags)
        try:
            endpoint = Endpoint(url, "deepseek-v4.1-flash")
            assert stream_chat(endpoint, chat_request(endpoint, "warm up", 4)).ok
            rtt = client_round_trip(endpoint)
            row = run_pp(endpoint, pp, depth, runs, prefix, rtt)
            cold = run_pp(endpoint, pp, 0, runs, prefix, rtt)
            row = within_ceiling(row, cold_prefill_rate([cold]))
            # what the bench before this fix printed: the whole prompt over TTFT, cache hits and all
            old = measure(
                stream_chat(
                    endpoint,
                    chat_request(endpoint, make_prompt(depth + pp, prefix()), 1),
                )
            )
            if depth:
                context = make_prompt(depth, prefix())
                stream_chat(endpoint, chat_request(endpoint, context, 1))
                old = measure(
                    stream_chat(
                        endpoint,
                        chat_request(endpoint, f"{context} {make_prompt(pp, prefix())}", 1),
                    )
                )
            theirs = benchy.run(url, runs, pp, 1, depth)
        finally:
            stop(proc)
        case = {
            "shape": name,
            "truth_tps": PREFILL,
            "ours_tps": round(row.tps_mean, 1) if row.tps_mean else None,
            "ours_error_pct": pct(row.tps_mean, PREFILL),
            "ours_net_of_client_rtt_tps": round(row.tps_net_mean, 1) if row.tps_net_mean else None,
            "ours_net_error_pct": pct(row.tps_net_mean, PREFILL),
            "ours_unknown": row.unknown,
            "client_rtt_ms": round(rtt * 1000, 2) if rtt else None,
            "old_method_error_pct": pct((old.prompt_tokens or 0) / old.ttft_s, PREFILL)
            if old.ttft_s
            else None,
        }
        if "error" in theirs:
            case["llama_benchy"] = theirs["error"]
        elif theirs["pp_tps"] is not None:
            case["llama_benchy_tps"] = round(theirs["pp_tps"], 1)
            case["llama_benchy_error_pct"] = pct(theirs["pp_tps"], PREFILL)
        cases.append(case)
    return cases


def spec_cases() -> list[dict]:
    cases = []
    history = ("--spec-history-drafts", "100000", "--spec-history-accept", "1.5")
    for name, flags in (
        ("vLLM counters, accept 1-5", ("--accept-range", "1-5", "--spec-metrics", "vllm")),
        ("SGLang gauge x4 ranks, accept 1-5", ("--accept-range", "1-5", "--spec-ranks", "4")),
        ("SGLang gauge x4 ranks, 3 per step", ("--tokens-per-chunk", "3", "--spec-ranks", "4")),
    ):
        proc, url = start_fake_lane(*flags, *history, "--first-chunk-alone", "--decode-tps", "2000")
        try:
            endpoint = Endpoint(url, "deepseek-v4.1-flash")
            before = read_metrics(endpoint)
            sampler = SpecSampler(endpoint, interval_s=0.1)
            for i in range(8):
                run_decode_probe(endpoint, DecodeProbe(128, 256), f"sf-spec-{i}")
            ours = sampler.stop()
            after = read_metrics(endpoint)
            lifetime = get_json(endpoint, "/get_server_info", root=True)["internal_states"][0]
        finally:
            stop(proc)
        steps = after["sparkfleet_demo:spec_steps_total"][0] - before["sparkfleet_demo:spec_steps_total"][0]
        tokens = (
            after["sparkfleet_demo:spec_step_tokens_total"][0]
            - before["sparkfleet_demo:spec_step_tokens_total"][0]
        )
        truth = tokens / steps
        cases.append(
            {
                "shape": name,
                "truth_accept_length": round(truth, 4),
                "ours": round(ours.value, 4) if ours else None,
                "ours_source": ours.source if ours else None,
                "ours_error_pct": pct(ours.value if ours else None, truth),
                "lifetime_get_server_info_error_pct": pct(lifetime["avg_spec_accept_length"], truth),
                "llama_benchy": "does not measure accept length",
            }
        )
    return cases


def client_cpu(rate: float = 100.0) -> dict:
    """Our CPU while streaming a 400-token answer at `rate` tok/s, as a share of the decode time."""
    proc, url = start_fake_lane("--decode-tps", str(rate), "--prefill-tps", "20000", "--usage", "continuous")
    try:
        endpoint = Endpoint(url, "deepseek-v4.1-flash")
        assert stream_chat(endpoint, chat_request(endpoint, "warm up", 4)).ok
        cpu0 = cpu_seconds()
        m = run_decode_probe(endpoint, DecodeProbe(PROMPT_TOKENS, 400), "sf-cpu").metrics
        cpu = cpu_seconds() - cpu0
    finally:
        stop(proc)
    decode_s = m.latency_s - m.ttft_s
    return {
        "decode_tps": rate,
        "client_cpu_ms": round(cpu * 1000, 2),
        "decode_s": round(decode_s, 3),
        "cpu_pct_of_decode": round(cpu / decode_s * 100, 3),
        "cpu_us_per_token": round(cpu / (m.completion_tokens or 1) * 1e6, 1),
    }


def worst(cases: list[dict], key: str) -> float | None:
    values = [abs(c[key]) for c in cases if c.get(key) is not None]
    return max(values) if values else None


# -- a real engine: vLLM's CPU build serving the tiny Qwen2 (tests/engine) --------------------------
def engine_window(url: str) -> dict:
    """The engine's histogram sums and counts now (read before and after one tool's run)."""
    root = url.rstrip("/").removesuffix("/v1")
    metrics = read_metrics(Endpoint(root + "/v1", "m")) or {}
    names = (
        "request_decode_time_seconds", "request_prefill_time_seconds", "request_generation_tokens",
        "request_prefill_kv_computed_tokens", "time_to_first_token_seconds", "inter_token_latency_seconds",
    )  # fmt: skip
    return {f"{n}_{k}": sum(metrics.get(f"vllm:{n}_{k}", [0.0])) for n in names for k in ("sum", "count")}


def engine_figures(before: dict, after: dict) -> dict:
    """The engine's own rates over one window: decode (first to last token), prefill, TTFT, ITL."""
    d = {k: after[k] - before[k] for k in after}
    decode_s, prefill_s = d["request_decode_time_seconds_sum"], d["request_prefill_time_seconds_sum"]
    after_first = d["request_generation_tokens_sum"] - d["request_decode_time_seconds_count"]
    itl_n, ttft_n = d["inter_token_latency_seconds_count"], d["time_to_first_token_seconds_count"]
    return {
        "requests": int(d["request_decode_time_seconds_count"]),
        "decode_tps": after_first / decode_s if decode_s > 0 else None,
        "prefill_tps": d["request_prefill_kv_computed_tokens_sum"] / prefill_s if prefill_s > 0 else None,
        "ttft_ms": 1000 * d["time_to_first_token_seconds_sum"] / ttft_n if ttft_n else None,
        "itl_ms": 1000 * d["inter_token_latency_seconds_sum"] / itl_n if itl_n else None,
    }


def _vs(ours: float | None, engine: float | None) -> float | None:
    return pct(ours, engine) if ours is not None and engine else None


def engine_cases(url: str, model: str, tokenizer: Path, vllm: Path, runs: int, benchy: Benchy) -> dict:
    """Each tool on the same real server, each held to the engine's counters over its own window."""
    endpoint = Endpoint(url, model, timeout=600)
    counter = itertools.count()

    def prefix() -> str:
        return f"sf-engine-acc-{next(counter)}"

    assert stream_chat(endpoint, chat_request(endpoint, "warm up", 4)).ok
    out: dict = {"url": url, "model": model, "runs": runs}

    # sparkfleet, request by request: each request is its own window
    tg_pct, pp_pct, tg_ours, tg_engine, pp_ours, pp_engine = [], [], [], [], [], []
    rtt = client_round_trip(endpoint)
    for _ in range(runs):
        before = engine_window(url)
        tg = run_tg(endpoint, TG, 0, 1, prefix)
        e_tg = engine_figures(before, engine_window(url))
        before = engine_window(url)
        pp = run_pp(endpoint, 512, 0, 1, prefix, rtt)
        e_pp = engine_figures(before, engine_window(url))
        tg_ours.append(tg.tps_mean)
        tg_engine.append(e_tg["decode_tps"])
        tg_pct.append(_vs(tg.tps_mean, e_tg["decode_tps"]))
        pp_ours.append(pp.tps_net_mean)
        pp_engine.append(e_pp["prefill_tps"])
        pp_pct.append(_vs(pp.tps_net_mean, e_pp["prefill_tps"]))
    out["sparkfleet"] = {
        "tg128_tps": tg_ours, "engine_decode_tps": tg_engine, "tg128_vs_engine_pct": tg_pct,
        "pp512_net_tps": pp_ours, "engine_prefill_tps": pp_engine, "pp512_net_vs_engine_pct": pp_pct,
        "client_rtt_ms": 1000 * (rtt or 0),
    }  # fmt: skip

    before = engine_window(url)
    result = Path(tempfile.mkdtemp(prefix="vllm-bench-serve-"))
    argv = [
        str(vllm), "bench", "serve", "--backend", "openai-chat", "--base-url", url.removesuffix("/v1"),
        "--endpoint", "/v1/chat/completions", "--model", model, "--tokenizer", str(tokenizer),
        "--dataset-name", "random", "--random-input-len", str(PROMPT_TOKENS), "--random-output-len", str(TG),
        "--num-prompts", str(runs), "--max-concurrency", "1", "--ignore-eos", "--save-result",
        "--result-dir", str(result), "--result-filename", "vbs.json",
    ]  # fmt: skip
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1200)
    e = engine_figures(before, engine_window(url))
    if done.returncode == 0 and (result / "vbs.json").is_file():
        doc = json.loads((result / "vbs.json").read_text())
        tps = 1000 / doc["mean_tpot_ms"] if doc.get("mean_tpot_ms") else None
        out["vllm_bench_serve"] = {
            "decode_tps_from_mean_tpot": tps, "engine_decode_tps": e["decode_tps"],
            "decode_vs_engine_pct": _vs(tps, e["decode_tps"]),
            "mean_ttft_ms": doc.get("mean_ttft_ms"), "engine_ttft_ms": e["ttft_ms"],
            "mean_itl_ms": doc.get("mean_itl_ms"), "engine_itl_ms": e["itl_ms"],
            "itl_vs_engine_pct": _vs(doc.get("mean_itl_ms"), e["itl_ms"]),
        }  # fmt: skip
    else:
        out["vllm_bench_serve"] = {"error": f"exit {done.returncode}: {done.stderr.strip()[-300:]}"}
    shutil.rmtree(result, ignore_errors=True)

    before = engine_window(url)
    theirs = benchy.run(url, runs, 512, TG, model=model, tokenizer=tokenizer)
    e = engine_figures(before, engine_window(url))
    if "error" in theirs:
        out["llama_benchy"] = theirs
    else:
        out["llama_benchy"] = {
            "tg128_tps": theirs["tg_tps"], "engine_decode_tps": e["decode_tps"],
            "tg128_vs_engine_pct": _vs(theirs["tg_tps"], e["decode_tps"]),
            "pp512_tps": theirs["pp_tps"], "engine_prefill_tps": e["prefill_tps"],
            "pp512_vs_engine_pct": _vs(theirs["pp_tps"], e["prefill_tps"]),
        }  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--decode-tps", type=float, default=400.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-benchy", action="store_true", help="our numbers only (faster)")
    parser.add_argument("--only-first-decode-shape", action="store_true", help="a smoke run of this script")
    parser.add_argument("--engine-url", help="also a real engine: a vLLM server's base URL (…/v1)")
    parser.add_argument("--engine-model", default="sparkfleet-test/tiny-qwen2")
    parser.add_argument("--engine-tokenizer", type=Path, help="the served model's folder (tokenizer.json)")
    parser.add_argument(
        "--vllm", type=Path, default=Path(".venv-vllm/bin/vllm"), help="for `vllm bench serve`"
    )
    parser.add_argument("--engine-only", action="store_true", help="only the real-engine section")
    parser.add_argument(
        "--engine-venv",
        type=Path,
        help="start the engine here: the tiny Qwen2 on this venv's vllm (.venv-vllm)",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="seconds: one run, the first decode shape, no llama-benchy"
    )
    args = parser.parse_args()
    if args.smoke:
        args.runs, args.only_first_decode_shape, args.skip_benchy = 1, True, True
    if args.engine_url or args.engine_venv:
        with tempfile.TemporaryDirectory(prefix="sparkfleet-bench-accuracy-") as scratch:
            benchy = Benchy(Path(scratch), args.skip_benchy)
            server = None
            try:
                if args.engine_venv:
                    vllm = engine_ready(args.engine_venv)
                    if vllm is None:
                        raise SystemExit(f"no engine venv at {args.engine_venv}: make engine-venv")
                    model = build_tiny_qwen(Path(scratch) / "hub")
                    server = start_engine(vllm, model, Path(scratch) / "vllm-serve.log")
                    args.engine_url, args.engine_tokenizer, args.vllm = server.url, model.snapshot, vllm
                    args.engine_model = model.repo
                engine = engine_cases(
                    args.engine_url, args.engine_model, args.engine_tokenizer, args.vllm, args.runs, benchy
                )
            finally:
                benchy.close()
                if server is not None:
                    server.stop()
        if args.engine_only:
            print(json.dumps({"benchmark": "bench_accuracy", "engine": engine}))
            return
    out: dict = {"benchmark": "bench_accuracy", "truth_decode_tps": args.decode_tps, "runs": args.runs}
    with tempfile.TemporaryDirectory(prefix="sparkfleet-bench-accuracy-") as scratch:
        benchy = Benchy(Path(scratch), args.skip_benchy)
        try:
            out["decode_tg128"] = decode_cases(
                args.decode_tps, args.runs, benchy, args.only_first_decode_shape
            )
            out["prefill"] = prefill_cases(args.runs, benchy)
        finally:
            benchy.close()
        out["spec_accept_length"] = spec_cases()
        out["client_cpu_at_100_tps"] = client_cpu()
        out["llama_benchy"] = {"version": benchy.version, "reason": benchy.reason}
    out["summary"] = {
        "decode_worst_abs_error_pct_ours": worst(out["decode_tg128"], "ours_error_pct"),
        "decode_worst_abs_error_pct_ours_vs_served": worst(out["decode_tg128"], "ours_vs_served_worst_pct"),
        "decode_worst_abs_error_pct_llama_benchy": worst(out["decode_tg128"], "llama_benchy_error_pct"),
        "prefill_worst_abs_error_pct_ours_net": worst(out["prefill"], "ours_net_error_pct"),
        "prefill_worst_abs_error_pct_llama_benchy": worst(out["prefill"], "llama_benchy_error_pct"),
        "spec_worst_abs_error_pct_ours": worst(out["spec_accept_length"], "ours_error_pct"),
        "client_cpu_pct_of_decode_at_100_tps": out["client_cpu_at_100_tps"]["cpu_pct_of_decode"],
    }
    if args.engine_url or args.engine_venv:
        out["engine"] = engine
    print(json.dumps(out))


if __name__ == "__main__":
    main()
