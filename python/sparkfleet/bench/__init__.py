"""Smoke, benchmarks and quality for a lane or any OpenAI-compatible URL.

client (timed SSE streams) → tokens (exact counts, and their source) → metrics (TTFT, ITL, TPOT,
decode tok/s) → probes / sweep / quality → run (one BenchRun record) → `bench.report` (files).
"""
