"""The Markdown view of a report document (a plain dict read back from its JSON).

A repeated figure may be recorded as {"mean": x, "ci95": y, ...}: it is shown as "x ± y" (the 95 %
confidence half-width), a plain number as itself.
"""

from __future__ import annotations

from typing import Any

from ...roofline.section import markdown_lines
from .comparability import flatten

FINGERPRINT_COLUMNS = (
    ("kernel", "kernel"),
    ("driver", "driver"),
    ("cuda", "CUDA"),
    ("nccl", "NCCL"),
    ("firmware", "firmware"),
    ("gpu_clocks", "GPU clocks"),
    ("power_mode", "power mode"),
)


def _fmt(value: Any, digits: int = 1, scale: float = 1.0) -> str:
    if value is None:
        return "—"
    if isinstance(value, dict) and isinstance(value.get("mean"), int | float):
        ci = value.get("ci95")
        mean = f"{value['mean'] * scale:.{digits}f}"
        return mean if not isinstance(ci, int | float) else f"{mean} ± {ci * scale:.{digits}f}"
    if isinstance(value, int | float):
        return f"{value * scale:.{digits}f}"
    return str(value)


def _gb(value: Any) -> str:
    return f"{value / 1e9:.1f} GB" if isinstance(value, int | float) else "—"


def _settings_lines(doc: dict[str, Any]) -> list[str]:
    flat = flatten(doc.get("settings") or {})
    if not flat:
        return []
    lines = ["", "## Settings (what makes two reports comparable)", "", "| setting | value |", "|---|---|"]
    for key, value in flat.items():
        shown = ", ".join(str(v) for v in value) if isinstance(value, tuple) else value
        lines.append(f"| {key} | {'—' if shown is None else shown} |")
    return lines


def _fingerprint_lines(doc: dict[str, Any]) -> list[str]:
    before, after = doc.get("fingerprints") or {}, doc.get("fingerprints_after") or {}
    if not before:
        return [
            "",
            "## Hosts",
            "",
            "- no host fingerprints recorded (a --url run has no hosts; a lane run records one per host)",
        ]
    head = " | ".join(title for _, title in FINGERPRINT_COLUMNS)
    lines = [
        "",
        "## Hosts (fingerprints)",
        "",
        f"| host | {head} | free memory before → after | image |",
        "|---" * (len(FINGERPRINT_COLUMNS) + 3) + "|",
    ]
    for host, fp in before.items():
        fp = fp or {}
        if fp.get("error"):
            lines.append(f"| {host} | not collected: {fp['error']} |" + " |" * (len(FINGERPRINT_COLUMNS) + 1))
            continue
        cells = " | ".join(str(fp.get(key) or "—") for key, _ in FINGERPRINT_COLUMNS)
        mem = _gb(fp.get("mem_available_bytes"))
        later = (after.get(host) or {}).get("mem_available_bytes")
        if later is not None:
            mem += f" → {_gb(later)}"
        lines.append(f"| {host} | {cells} | {mem} | `{fp.get('image_id') or '—'}` |")
    return lines


def _dist(d: dict[str, Any] | None, scale: float = 1000.0) -> str:
    if not d:
        return "—"
    return " / ".join(_fmt(d.get(q), 1, scale) for q in ("p50", "p90", "p99"))


def render_markdown(doc: dict[str, Any], stem: str) -> str:
    lines = [f"# Bench report `{stem}`", ""]
    status = doc.get("status")
    lines.append(
        f"**Status: {'OK' if status == 'ok' else 'FAILED'}**"
        + ("" if status == "ok" else " — numbers below are missing where a step failed; do not compare them.")
    )
    for failure in doc.get("failures") or []:
        lines.append(f"- failure: {failure}")
    lines += [
        "",
        f"- lane: {doc.get('lane') or '(none: --url)'}",
        f"- url: {doc.get('url')}",
        f"- model: {doc.get('model')}",
        f"- hosts: {', '.join(doc.get('hosts') or []) or '—'}",
        f"- recipe sha256: {doc.get('recipe_sha256') or '—'}",
        *([f"- **{doc['weights']}** (launched with --allow-nas-weights)"] if doc.get("weights") else []),
        f"- created (UTC): {doc.get('created_utc')}; duration {_fmt(doc.get('duration_s'))} s; "
        f"client CPU {_fmt(doc.get('client_cpu_s'), 2)} s",
        *_estimate_lines(doc.get("estimate")),
        f"- token counts from: {', '.join(doc.get('token_sources') or []) or '—'}",
        f"- sparkfleet {doc.get('sparkfleet_version')}",
    ]
    if doc.get("pins"):
        lines += [
            "",
            "## Pins in force",
            "",
            "| pin | kind | source | value | resolved |",
            "|---|---|---|---|---|",
        ]
        for name, pin in doc["pins"].items():
            lines.append(
                f"| {name} | {pin.get('kind')} | {pin.get('source')} | `{pin.get('value')}` | "
                f"{'yes' if pin.get('resolved') else 'no'} |"
            )
    lines += _settings_lines(doc) + _fingerprint_lines(doc)
    if doc.get("smoke"):
        lines += [
            "",
            "## Smoke",
            "",
            "| prompt | expected | answer | finish | pass |",
            "|---|---|---|---|---|",
        ]
        for s in doc["smoke"]:
            answer = (s.get("answer") or s.get("problem") or "").replace("|", "\\|").replace("\n", " ")[:80]
            lines.append(
                f"| {s['prompt']} | {s['expect']} | {answer} | {s.get('finish_reason')} | "
                f"{'yes' if s['passed'] else 'NO'} |"
            )
    probe = doc.get("decode_probe")
    if probe:
        m, p = probe["metrics"], probe["probe"]
        lines += [
            "",
            "## Decode probe",
            "",
            f"{p['prompt_tokens']}-{_unit(doc)} prompt, max_tokens {p['max_tokens']}, temperature 0, "
            "streaming "
            f"(prompt sizes in {doc.get('prompt_sizing') or 'words or tokens (not recorded)'})",
            "",
        ]
        if m.get("error"):
            lines.append(f"**failed:** {m['error']}")
        else:
            lines += [
                f"- decode: **{_fmt(m['decode_tps'])} tok/s** (tokens from {m['token_source']})",
                f"- TTFT: {_fmt(m['ttft_s'], 1, 1000)} ms; TPOT {_fmt(m['tpot_s'], 2, 1000)} ms; "
                f"{m['completion_tokens']} tokens in {m['chunks']} chunks "
                f"({_fmt(m['completion_tokens'] / max(m['chunks'], 1), 2)} tokens/chunk)",
                f"- prompt tokens (server): {m.get('prompt_tokens')}; cached: {m.get('cached_tokens')}",
            ]
    t = doc.get("ttft") or {}
    if t.get("mean") is not None:
        ci = f" ± {_fmt(t['ci95'], 1, 1000)}" if t.get("ci95") is not None else ""
        lines.append(
            f"- headline TTFT: **{_fmt(t['mean'], 1, 1000)}{ci} ms** (95 % CI; {len(t['samples'])} runs of "
            f"a {t.get('prompt_tokens')}-token prompt, max_tokens 1)"
        )
    if doc.get("table"):
        lines += [
            "",
            "## pp/tg (llama-bench style)",
            "",
            "ppN @ dD: N new prompt tokens prefilled with D tokens of context already cached (docs/bench.md: "
            "Benchmarks that tell the truth). "
            "Client round trip (GET /v1/models, no engine step): "
            f"{_fmt(doc.get('client_rtt_s'), 1, 1000)} ms; "
            f"cold prefill ceiling: {_fmt(doc.get('cold_prefill_tps'))} tok/s.",
            "",
            "| test | depth | t/s | ± 95 % CI | t/s net of client RTT | runs | TTFT ms | note |",
            "|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in doc["table"]:
            note = f"FAILED: {r['error']}" if r.get("error") else (r.get("token_source") or "")
            note = r.get("unknown") or (f"{note}; {r['basis']}" if r.get("basis") else note)
            net_ci = r.get("tps_net_ci95")
            net = _fmt(r.get("tps_net_mean")) + (f" ± {_fmt(net_ci)}" if net_ci is not None else "")
            lines.append(
                f"| {r['test']} | d{r['depth']} | {_fmt(r['tps_mean'])} | "
                f"{_fmt(r.get('tps_ci95', r.get('tps_std')))} | "
                f"{net} | "
                f"{r.get('runs')} | {_fmt(r.get('ttft_s_mean'), 1, 1000)} | {note} |"
            )
    if doc.get("sweep"):
        lines += [
            "",
            "## Concurrency sweep",
            "",
            "| c | requests | failed | aggregate tok/s | per-request tok/s p50 | TTFT ms p50/p90/p99 "
            "| ITL ms p50/p90/p99 | TPOT ms p50/p90/p99 |",
            "|---:|---:|---:|---:|---:|---|---|---|",
        ]
        for lv in doc["sweep"]:
            per = lv.get("per_request_tps")
            lines.append(
                f"| {lv['concurrency']} | {lv['requests']} | {lv['failed']} | "
                f"{_fmt(lv['aggregate_tps'])} | {_fmt(per['p50']) if per else '—'} | "
                f"{_dist(lv.get('ttft_s'))} | "
                f"{_dist(lv.get('itl_s'))} ({lv.get('itl_basis') or 'per chunk'}) | "
                f"{_dist(lv.get('tpot_s'))} |"
            )
            for err in lv.get("errors") or []:
                lines.append(f"|  | | | **failed:** {err} | | | | |")
    spec = doc.get("spec_accept")
    lines += [
        "",
        "## Speculative decoding",
        "",
        f"- average accept length: {_fmt(spec['value'], 2)} (from {spec['source']})"
        if spec
        else "- average accept length: not reported by the server",
    ]
    lines += ["", "## Quality (tool-eval-bench)", ""]
    q = doc.get("quality")
    if not q:
        lines.append(f"- {doc.get('quality_note') or 'not run'}")
    elif q.get("status") != "ok":
        lines.append(f"- **{q.get('status')}**: {q.get('error')}")
    else:
        lines += [
            f"- score: **{_fmt(q['score'], 0)}/100** "
            f"({_fmt(q.get('points'), 0)}/{_fmt(q.get('max_points'), 0)} points, "
            f"{q.get('scenarios')} scenarios) {q.get('rating') or ''}",
            f"- tool-eval-bench {q.get('tool_version')}",
        ]
        for f in q.get("failed_scenarios") or []:
            timed_out = f.get("failure_kind") == "timeout"
            late = " (past the request deadline: left out of the score)" if timed_out else ""
            lines.append(f"  - {f['scenario_id']} {f['status']}{late}: {f.get('summary') or ''}")
    roof = doc.get("roofline")
    if isinstance(roof, dict) and roof:
        lines += ["", *markdown_lines(roof)]
    return "\n".join(lines) + "\n"


def _estimate_lines(est: object) -> list[str]:
    """What the plan was priced at after the decode probe, beside what the run took."""
    if not isinstance(est, dict) or not isinstance(est.get("seconds"), int | float):
        return []
    return [
        f"- estimate after the decode probe ({_fmt(est.get('at_s'))} s in): {_fmt(est['seconds'])} s more "
        f"before quality, at {_fmt(est.get('decode_tps'))} tok/s decode, {_fmt(est.get('prefill_tps'), 0)} "
        "tok/s prefill"
    ]


def _unit(doc: dict) -> str:
    """What a prompt size counted: tokens when a tokenizer (local or the engine's) sized it."""
    sizing = doc.get("prompt_sizing") or ""
    return "word" if sizing.startswith("words") else "token"
