"""Bench reports: one run → `<UTC YYYY-MM-DD_HHMMSS>_<tag>.{json,md,png}`; history; comparison.

The JSON is the record (everything measured, the pins in force, the recipe hash, the hosts); the
Markdown and the PNG are views of it. `list` and `compare` read the JSON documents back as plain
dicts, so reports written by older versions stay comparable. A comparison checks a fixed set of key
metrics against thresholds (the lane's [bench.thresholds]) and says which ones regressed; a failed
run always counts as a regression — it has no numbers to compare.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from .atomic import write_bytes
from .errors import SparkfleetError
from .jsonable import to_jsonable

_STEM = re.compile(r"^(\d{4}-\d{2}-\d{2}_\d{6})_(.+)$")


@dataclass(frozen=True)
class ReportPaths:
    json: Path
    markdown: Path
    png: Path | None


@dataclass(frozen=True)
class ReportSummary:
    name: str  # the stem, e.g. 2026-09-27_053009_exl3-2x-local
    path: Path
    created_utc: str
    tag: str
    status: str
    decode_tps: float | None
    quality_score: float | None


def safe_tag(tag: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", tag).strip("-.")
    return cleaned or "bench"


def report_stem(created_utc: str, tag: str) -> str:
    when = datetime.strptime(created_utc, "%Y-%m-%dT%H:%M:%SZ")
    return f"{when:%Y-%m-%d_%H%M%S}_{safe_tag(tag)}"


def to_document(run: Any) -> dict[str, Any]:
    """A BenchRun (or any dataclass record) as the JSON document a report stores."""
    return to_jsonable(run, hidden_fields=True, float_digits=6)


# -- writing ----------------------------------------------------------------------------------------
def write_report(run: Any, out_dir: Path) -> ReportPaths:
    """Write JSON, Markdown and PNG for one run into `out_dir` (each atomically)."""
    doc = to_document(run)
    stem = report_stem(doc["created_utc"], doc["tag"])
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = ReportPaths(out_dir / f"{stem}.json", out_dir / f"{stem}.md", out_dir / f"{stem}.png")
    write_bytes(paths.json, (json.dumps(doc, indent=2) + "\n").encode())
    write_bytes(paths.markdown, render_markdown(doc, stem).encode())
    png = render_png(doc)
    if png is None:
        return dataclasses.replace(paths, png=None)
    write_bytes(paths.png, png)
    return paths


def _fmt(value: Any, digits: int = 1, scale: float = 1.0) -> str:
    if value is None:
        return "—"
    if isinstance(value, int | float):
        return f"{value * scale:.{digits}f}"
    return str(value)


def _dist(d: dict[str, Any] | None, scale: float = 1000.0) -> str:
    if not d:
        return "—"
    return f"{d['p50'] * scale:.1f} / {d['p90'] * scale:.1f} / {d['p99'] * scale:.1f}"


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
        f"- created (UTC): {doc.get('created_utc')}; duration {_fmt(doc.get('duration_s'))} s; "
        f"client CPU {_fmt(doc.get('client_cpu_s'), 2)} s",
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
            f"{p['prompt_tokens']}-token prompt, max_tokens {p['max_tokens']}, temperature 0, streaming",
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
    if doc.get("table"):
        lines += [
            "",
            "## pp/tg (llama-bench style)",
            "",
            "ppN @ dD: N new prompt tokens prefilled with D tokens of context already cached (README: "
            "Benchmarks that tell the truth). "
            f"Client round trip (one-token request): {_fmt(doc.get('client_rtt_s'), 1, 1000)} ms; "
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
                f"{_fmt(r.get('tps_ci95', r['tps_std']))} | "
                f"{net} | "
                f"{r['runs']} | {_fmt(r['ttft_s_mean'], 1, 1000)} | {note} |"
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
                f"{_dist(lv.get('itl_s'))} | {_dist(lv.get('tpot_s'))} |"
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
            lines.append(f"  - {f['scenario_id']} {f['status']}: {f.get('summary') or ''}")
    return "\n".join(lines) + "\n"


def render_png(doc: dict[str, Any]) -> bytes | None:
    """Two plots: tok/s vs concurrency, and the TTFT distribution. None when there is nothing to draw."""
    levels = [lv for lv in doc.get("sweep") or [] if lv.get("aggregate_tps") is not None]
    ttfts = [t * 1000 for lv in levels for t in lv.get("ttft_samples_s") or []]
    if not levels:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    try:
        conc = [lv["concurrency"] for lv in levels]
        left.plot(conc, [lv["aggregate_tps"] for lv in levels], "o-", label="aggregate")
        per = [
            (lv["concurrency"], lv["per_request_tps"]["p50"]) for lv in levels if lv.get("per_request_tps")
        ]
        if per:
            left.plot([c for c, _ in per], [v for _, v in per], "s--", label="per request (p50)")
        left.set_xscale("log", base=2)
        left.set_xticks(conc, [str(c) for c in conc])
        left.set_xlabel("concurrency")
        left.set_ylabel("output tok/s")
        left.set_title("tok/s vs concurrency")
        left.grid(True, alpha=0.3)
        left.legend()
        right.hist(ttfts, bins=min(30, max(5, len(ttfts) // 2)))
        right.set_xlabel("TTFT (ms)")
        right.set_ylabel("requests")
        right.set_title(f"TTFT distribution (sweep, n={len(ttfts)})")
        right.grid(True, alpha=0.3)
        fig.suptitle(f"{doc.get('lane') or doc.get('url')} — {doc.get('tag')} — {doc.get('created_utc')}")
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        return buf.getvalue()
    finally:
        plt.close(fig)


# -- history --------------------------------------------------------------------------------------
def load_document(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise SparkfleetError(f"no report {path}") from None
    except ValueError as exc:
        raise SparkfleetError(f"{path}: not a JSON report: {exc}") from None
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("sparkfleet.bench/"):
        raise SparkfleetError(f"{path}: not a sparkfleet bench report")
    return doc


def list_reports(reports_dir: Path) -> list[ReportSummary]:
    """The reports in a folder, oldest first (their names sort by time)."""
    out = []
    for path in sorted(reports_dir.glob("*.json")) if reports_dir.is_dir() else []:
        match = _STEM.match(path.stem)
        if not match:
            continue
        try:
            doc = load_document(path)
        except SparkfleetError:
            continue
        metrics = key_metrics(doc)
        out.append(
            ReportSummary(
                path.stem,
                path,
                doc.get("created_utc", ""),
                match.group(2),
                doc.get("status", "?"),
                metrics.get("decode_tps"),
                metrics.get("quality_score"),
            )
        )
    return out


def resolve(ref: str, reports_dir: Path | None) -> Path:
    """A report by path, by name (stem) in `reports_dir`, or `latest`."""
    as_path = Path(ref)
    if as_path.suffix == ".json" and as_path.is_file():
        return as_path
    if reports_dir is not None:
        if ref == "latest":
            reports = list_reports(reports_dir)
            if not reports:
                raise SparkfleetError(f"no reports in {reports_dir}", hint="run `sparkfleet bench` first")
            return reports[-1].path
        candidate = reports_dir / f"{ref.removesuffix('.json')}.json"
        if candidate.is_file():
            return candidate
        matches = sorted(reports_dir.glob(f"*{ref}*.json"))
        if len(matches) == 1:
            return matches[0]
    raise SparkfleetError(
        f"no report {ref!r}" + (f" in {reports_dir}" if reports_dir else ""),
        hint="give a report name from `sparkfleet report list LANE` or a path to its .json",
    )


# -- comparison ----------------------------------------------------------------------------------
def key_metrics(doc: dict[str, Any]) -> dict[str, float | None]:
    """The numbers a comparison looks at, by stable names."""
    out: dict[str, float | None] = {}
    probe = (doc.get("decode_probe") or {}).get("metrics") or {}
    out["decode_tps"] = probe.get("decode_tps")
    out["ttft_s"] = probe.get("ttft_s")
    for row in doc.get("table") or []:
        out[f"{row['test']}@d{row['depth']}"] = row.get("tps_mean")
    for lv in doc.get("sweep") or []:
        out[f"aggregate_tps@c{lv['concurrency']}"] = lv.get("aggregate_tps")
    q = doc.get("quality") or {}
    out["quality_score"] = q.get("score") if q.get("status") == "ok" else None
    return out


@dataclass(frozen=True)
class MetricDelta:
    name: str
    base: float | None
    new: float | None
    change_pct: float | None
    limit: str
    regression: bool


@dataclass(frozen=True)
class Comparison:
    base: str
    new: str
    deltas: list[MetricDelta]
    regressions: list[str]

    @property
    def ok(self) -> bool:
        return not self.regressions


def _rule(name: str, thresholds: Any) -> tuple[str, float] | None:
    """(direction, allowed change) for a metric: 'drop_pct' / 'rise_pct' / 'drop_points'."""
    if name == "decode_tps" or name.startswith("tg"):
        return "drop_pct", thresholds.decode_tps_drop_pct
    if name.startswith("pp"):
        return "drop_pct", thresholds.prefill_tps_drop_pct
    if name == "ttft_s":
        return "rise_pct", thresholds.ttft_rise_pct
    if name.startswith("aggregate_tps"):
        return "drop_pct", thresholds.aggregate_tps_drop_pct
    if name == "quality_score":
        return "drop_points", thresholds.quality_drop_points
    return None


def compare(
    base: dict[str, Any], new: dict[str, Any], thresholds: Any, base_name: str = "base", new_name: str = "new"
) -> Comparison:
    regressions = []
    if new.get("status") != "ok":
        regressions.append(f"{new_name} failed: {'; '.join(new.get('failures') or ['unknown'])}")
    b, n = key_metrics(base), key_metrics(new)
    deltas = []
    for name in b:
        rule = _rule(name, thresholds)
        if rule is None or b[name] is None:
            continue
        direction, allowed = rule
        limit = {"drop_points": f"-{allowed:g} points", "drop_pct": f"-{allowed:g}%"}.get(
            direction, f"+{allowed:g}%"
        )
        old, cur = b[name], n.get(name)
        if cur is None:  # absent: not measured this time (other settings); None: the step failed
            deltas.append(MetricDelta(name, old, None, None, limit, name in n))
            if name in n:
                regressions.append(f"{name}: measured in {base_name}, missing (failed) in {new_name}")
            continue
        change = (cur - old) / old * 100 if old else None
        if direction == "drop_points":
            bad = cur < old - allowed
        elif direction == "drop_pct":
            bad = change is not None and change < -allowed
        else:
            bad = change is not None and change > allowed
        deltas.append(MetricDelta(name, old, cur, change, limit, bad))
        if bad:
            what = f"{cur - old:+.1f} points" if direction == "drop_points" else f"{change:+.1f}%"
            regressions.append(f"{name}: {old:.4g} → {cur:.4g} ({what}, limit {limit})")
    return Comparison(base_name, new_name, deltas, regressions)
