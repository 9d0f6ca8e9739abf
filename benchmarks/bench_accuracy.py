"""Decode tok/s accuracy: sparkfleet's client vs llama-benchy 0.4.0 vs the truth, and our CPU per token.

Against the demo OpenAI server (sleep-paced: its decode rate is the truth) with 1 and with 3 tokens
per SSE chunk (3 is what speculative decoding looks like on the wire). llama-benchy needs a tokenizer
and downloads a book; both are made here and served from loopback: a word-level tokenizer.json
matching the demo server's token = word rule, and a generated text on a local HTTP server. Its
book cache goes to a temporary HOME. Prints one JSON line. If llama-benchy cannot run, the line says
why (field "llama_benchy.reason") and still carries our numbers.

    .venv/bin/python benchmarks/bench_accuracy.py [--decode-tps 400] [--runs 3]
"""

from __future__ import annotations

import argparse
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
from sparkfleet.bench.probes import DecodeProbe, run_decode_probe
from sparkfleet.demo.openai_server import _VOCAB

PROMPT_TOKENS, MAX_TOKENS = 487, 400
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


def start_fake_lane(per_chunk: int, decode_tps: float) -> tuple[subprocess.Popen, str]:
    argv = [
        sys.executable,
        "-u",
        "-m",
        "sparkfleet.demo.openai_server",
        "--port",
        "0",
        "--decode-tps",
        str(decode_tps),
        "--prefill-tps",
        "20000",
        "--tokens-per-chunk",
        str(per_chunk),
        "--usage",
        "continuous",
    ]
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
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


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


def measure_ours(url: str, runs: int) -> dict:
    endpoint = Endpoint(url, "deepseek-v4.1-flash")
    assert stream_chat(endpoint, chat_request(endpoint, "warm up", 4)).ok
    rates, tokens, source = [], 0, None
    cpu0 = cpu_seconds()
    for i in range(runs):
        m = run_decode_probe(endpoint, DecodeProbe(PROMPT_TOKENS, MAX_TOKENS), f"sf-acc-r{i}").metrics
        if not m.ok or m.decode_tps is None:
            raise SystemExit(f"our probe failed: {m.error}")
        rates.append(m.decode_tps)
        tokens += m.completion_tokens or 0
        source = m.token_source
    cpu = cpu_seconds() - cpu0
    return {
        "tps": sum(rates) / len(rates),
        "samples": rates,
        "token_source": source,
        "cpu_us_per_token": cpu / tokens * 1e6,
    }


def measure_benchy(url: str, runs: int, tokenizer: Path, book_url: str, home: Path) -> dict:
    exe = shutil.which("llama-benchy", path=str(Path(sys.executable).parent)) or shutil.which("llama-benchy")
    if exe is None:
        return {
            "status": "unavailable",
            "reason": "llama-benchy is not installed (pip install llama-benchy==0.4.0)",
        }
    result = home / "benchy.json"
    argv = [
        exe,
        "--base-url",
        url,
        "--model",
        "local/wordlevel",
        "--served-model-name",
        "deepseek-v4.1-flash",
        "--tokenizer",
        str(tokenizer),
        "--book-url",
        book_url,
        "--pp",
        str(PROMPT_TOKENS),
        "--tg",
        str(MAX_TOKENS),
        "--runs",
        str(runs),
        "--exact-tg",
        "--latency-mode",
        "none",
        "--skip-coherence",
        "--format",
        "json",
        "--save-result",
        str(result),
    ]
    env = {
        **os.environ,
        "HOME": str(home),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    cpu0 = cpu_seconds(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=home)
    cpu = cpu_seconds(resource.RUSAGE_CHILDREN) - cpu0
    if done.returncode != 0 or not result.is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"status": "failed", "reason": f"exit {done.returncode}: {' | '.join(tail)}"[:400]}
    doc = json.loads(result.read_text())
    tg = doc["benchmarks"][0]["tg_throughput"]
    return {
        "status": "ran",
        "version": doc.get("version"),
        "tps": tg["mean"],
        "samples": tg["values"],
        "process_cpu_s": cpu,
        "wall_s": time.monotonic() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--decode-tps", type=float, default=400.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    truth = args.decode_tps
    out: dict = {
        "benchmark": "bench_accuracy",
        "truth_decode_tps": truth,
        "prompt_tokens": PROMPT_TOKENS,
        "max_tokens": MAX_TOKENS,
        "runs": args.runs,
        "cases": [],
    }
    with tempfile.TemporaryDirectory(prefix="sparkfleet-bench-accuracy-") as scratch:
        work = Path(scratch)
        rng = random.Random(7)
        (work / "book.txt").write_text(" ".join(rng.choice(BOOK_WORDS) for _ in range(40000)))
        benchy_note = None
        try:
            make_tokenizer(work / "tokenizer", set(BOOK_WORDS) | set(_VOCAB))
        except ImportError as exc:
            benchy_note = f"no tokenizers package to build a local tokenizer: {exc}"
        books = ThreadingHTTPServer(("127.0.0.1", 0), partial(QuietFiles, directory=str(work)))
        threading.Thread(target=books.serve_forever, daemon=True).start()
        book_url = f"http://127.0.0.1:{books.server_address[1]}/book.txt"
        cpu_per_token = []
        try:
            for per_chunk in (1, 3):
                proc, url = start_fake_lane(per_chunk, truth)
                try:
                    ours = measure_ours(url, args.runs)
                    benchy = (
                        {"status": "unavailable", "reason": benchy_note}
                        if benchy_note
                        else measure_benchy(url, args.runs, work / "tokenizer", book_url, work)
                    )
                finally:
                    stop(proc)
                cpu_per_token.append(ours["cpu_us_per_token"])
                case = {
                    "tokens_per_chunk": per_chunk,
                    "ours_tps": round(ours["tps"], 3),
                    "ours_error_pct": round((ours["tps"] - truth) / truth * 100, 3),
                    "ours_token_source": ours["token_source"],
                }
                if benchy.get("status") == "ran":
                    case |= {
                        "llama_benchy_tps": round(benchy["tps"], 3),
                        "llama_benchy_error_pct": round((benchy["tps"] - truth) / truth * 100, 3),
                        "ratio_ours_to_llama_benchy": round(ours["tps"] / benchy["tps"], 5),
                        "llama_benchy_process_cpu_s": round(benchy["process_cpu_s"], 2),
                    }
                out["cases"].append(case)
                out["llama_benchy"] = {
                    k: v for k, v in benchy.items() if k in ("status", "version", "reason")
                }
        finally:
            books.shutdown()
            books.server_close()
    out["ours_client_cpu_us_per_token"] = round(sum(cpu_per_token) / len(cpu_per_token), 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
