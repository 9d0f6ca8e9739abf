"""Where a single request's decode rate parts from vLLM's own `request_decode_time`.

tests/engine holds sparkfleet's decode to the engine's counter as the median of five requests
within 1 %, because single requests on a loaded 2-core box read several % off. This finds out
whose clock moves. For each request (one at a time, nothing else on the server) it reads the
stream with a raw socket that asks the kernel for each packet's arrival time (SO_TIMESTAMPNS),
and compares first-to-last content chunk as seen

- by the client's clock after each read returns (what a client, sparkfleet's bench included, sees);
- by the kernel's arrival stamp (the client's own scheduling removed);
- by vLLM's API server (`e2e_request_latency − time_to_first_token`: its own first and last output
  processed, same request);
- by vLLM's EngineCore (`request_decode_time`: the step that made the first token to the last),

all as tok/s over the same tokens after the first chunk. Prints one JSON line of per-request
deviations (%) and their medians.

    .venv/bin/python benchmarks/decode_deviation.py --engine-venv .venv-vllm [--requests 16]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import struct
import tempfile
import time
from pathlib import Path

from sparkfleet.bench.client import chat_request, stream_chat
from sparkfleet.bench.prompts import make_prompt
from sparkfleet.demo.tinyqwen import build_tiny_qwen
from sparkfleet.demo.vllm_engine import EngineServer, engine_ready, start_engine

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux
TOKENS = 192


def stamped_stream(port: int, body: dict) -> list[tuple[float, float, int]]:
    """(kernel arrival, client read, completion tokens so far) of every content chunk."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    data = json.dumps(body).encode()
    head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    sock.sendall(f"{head}Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
    buf, chunks = b"", []
    try:
        while True:
            msg, ancillary, _, _ = sock.recvmsg(65536, 1024)
            read_at = time.time()
            if not msg:
                return chunks
            kernel_at = read_at
            for level, kind, raw in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack("qq", raw[:16])
                    kernel_at = sec + nsec * 1e-9
            buf += msg
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                start = event.find(b"data: ")
                if start < 0 or event[start + 6 :].strip() == b"[DONE]":
                    continue
                try:
                    doc = json.loads(event[start + 6 :])
                except ValueError:
                    continue
                choices = doc.get("choices") or []
                if choices and (choices[0].get("delta") or {}).get("content"):
                    chunks.append((kernel_at, read_at, int((doc.get("usage") or {})["completion_tokens"])))
    finally:
        sock.close()


def one_request(server: EngineServer, i: int) -> dict | None:
    """One request's deviations; None when its chunks arrived in one read (a loaded machine read
    the whole stream at once), which leaves no decode interval to time."""
    ep = server.endpoint
    body = chat_request(ep, make_prompt(200, f"decode-deviation-{i}"), TOKENS, ignore_eos=True)
    before = server.metrics()
    chunks = stamped_stream(server.port, body)
    after = server.metrics()

    def delta(name: str) -> float:
        return sum(after[name]) - sum(before[name])

    core = (TOKENS - 1) / delta("vllm:request_decode_time_seconds_sum")
    api = (TOKENS - 1) / (
        delta("vllm:e2e_request_latency_seconds_sum") - delta("vllm:time_to_first_token_seconds_sum")
    )
    after_first = TOKENS - chunks[0][2]
    if len(chunks) < 2 or chunks[-1][0] <= chunks[0][0] or chunks[-1][1] <= chunks[0][1]:
        return None
    kernel = after_first / (chunks[-1][0] - chunks[0][0])
    read = after_first / (chunks[-1][1] - chunks[0][1])

    def pct(a: float, b: float) -> float:
        return round((a / b - 1) * 100, 3)

    return {
        "engine_decode_tps": round(core, 2),
        "client_read_vs_core_pct": pct(read, core),
        "kernel_vs_core_pct": pct(kernel, core),
        "kernel_vs_api_server_pct": pct(kernel, api),
        "api_server_vs_core_pct": pct(api, core),
        "client_lag_first_ms": round((chunks[0][1] - chunks[0][0]) * 1e3, 2),
        "client_lag_last_ms": round((chunks[-1][1] - chunks[-1][0]) * 1e3, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine-venv", type=Path, default=Path(".venv-vllm"))
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--smoke", action="store_true", help="two requests: that it runs, not its figures")
    args = parser.parse_args()
    if args.smoke:
        args.requests = 2
    vllm = engine_ready(args.engine_venv)
    if vllm is None:
        why = f"cannot run here: no engine venv at {args.engine_venv} (make engine-venv)"
        print(json.dumps({"error": why}))
        raise SystemExit(2)
    with tempfile.TemporaryDirectory(prefix="sparkfleet-decode-deviation-") as scratch:
        model = build_tiny_qwen(Path(scratch) / "hub")
        server = start_engine(vllm, model, Path(scratch) / "vllm-serve.log")
        try:
            assert stream_chat(server.endpoint, chat_request(server.endpoint, "warm up", 4)).ok
            rows, unmeasurable = [], 0
            for i in range(3 * args.requests):  # a request read in one go is asked again
                row = one_request(server, i)
                if row is None:
                    unmeasurable += 1
                elif len(rows) < args.requests:
                    rows.append(row)
                if len(rows) == args.requests:
                    break
        finally:
            server.stop()
    if not rows:
        print(json.dumps({"error": f"all {unmeasurable} requests were read in one go: no decode interval"}))
        raise SystemExit(1)
    keys = (
        "client_read_vs_core_pct",
        "kernel_vs_core_pct",
        "kernel_vs_api_server_pct",
        "api_server_vs_core_pct",
    )
    out = {
        "benchmark": "decode_deviation",
        "tokens": TOKENS,
        "requests": rows,
        "requests_read_in_one_go": unmeasurable,
        "median_pct": {k: statistics.median(r[k] for r in rows) for k in keys},
        "worst_abs_pct": {k: max(abs(r[k]) for r in rows) for k in keys},
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
