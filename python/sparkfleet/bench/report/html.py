"""`sparkfleet report html LANE`: one static, self-contained history page per lane.

Inline SVG drawn here (no JavaScript, no network, no external assets: the page opens from a file
share or an e-mail attachment the same): decode tok/s, TTFT p50/p99 at c=1 and at the top
concurrency level, quality score, and % of the roofline bound when reports carry a `roofline`
section — each over the lane's runs, oldest left, every value axis from zero, the baseline marked
with a dashed line. Below, the table of runs with settings, pins, host fingerprints (a change from
the previous run is flagged) and links to each report's files, relative to the page.

Elements carry stable ids and data attributes (`svg#chart-decode`, `g.series[data-series]`,
`circle.pt`) so a test can check, in a real browser's DOM, what was drawn.
"""

from __future__ import annotations

import html
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ...base.atomic import write_bytes
from .comparability import VOLATILE_FINGERPRINT_FIELDS
from .history import Figure, HistoryPoint, lane_history, relative_link

# One colour per series, and none shared with the markers (the browser test finds them by colour).
COLORS = {
    "decode": "#1f77b4",
    "ttft_c1_p50": "#2ca02c",
    "ttft_c1_p99": "#98df8a",
    "ttft_top_p50": "#9467bd",
    "ttft_top_p99": "#c5b0d5",
    "quality": "#17becf",
    "roofline": "#8c564b",
    "baseline": "#ff7f0e",
    "failed": "#d62728",
    "settings": "#7f7f7f",
}
W, H = 960, 250
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 46


@dataclass(frozen=True)
class Series:
    key: str
    label: str
    values: Sequence[Figure | None]
    dashed: bool = False


@dataclass(frozen=True)
class Chart:
    key: str
    title: str
    unit: str
    series: Sequence[Series]
    empty_note: str
    y_max: float | None = None


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _nice_max(value: float) -> float:
    if not math.isfinite(value):  # finite figures whose sum overflows (1e308 + its ci95)
        value = sys.float_info.max
    if value <= 0:
        return 1.0
    exp = 10.0 ** math.floor(math.log10(value))  # a float: 2 * 10**308 as an int overflows later
    for step in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if step * exp >= value:
            return step * exp if math.isfinite(step * exp) else value
    return 10 * exp


def _fmt(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 or value == int(value) else f"{value:.1f}"


def _axis_labels(points: Sequence[HistoryPoint]) -> list[str]:
    """MM-DD HH:MM under each run; with seconds when two runs share a minute."""
    short = [p.created_utc[5:16].replace("T", " ") for p in points]
    if len(set(short)) < len(short):
        short = [p.created_utc[5:19].replace("T", " ") for p in points]
    return short


def svg_chart(chart: Chart, points: Sequence[HistoryPoint]) -> str:
    n = max(len(points), 1)
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM
    drawn = [s for s in chart.series if any(v is not None for v in s.values)]
    top = max((v.value + (v.ci95 or 0) for s in drawn for v in s.values if v is not None), default=0.0)
    y_max = chart.y_max or _nice_max(top * 1.08)

    def x(i: int) -> float:
        return LEFT + (i + 0.5) * plot_w / n

    def y(v: float) -> float:
        return TOP + (1 - max(v, 0) / y_max) * plot_h

    out = [
        f'<svg id="chart-{chart.key}" class="chart" data-series-drawn="{len(drawn)}" '
        f'xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
        f'role="img" aria-label="{_e(chart.title)}">'
    ]
    for k in range(6):  # value axis from zero, five steps
        v = y_max * (k / 5)  # not y_max * k: that overflows for a (finite) 1e308
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="grid"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" class="tick" text-anchor="end">{_fmt(v)}</text>')
    mid = TOP + plot_h / 2
    out.append(
        f'<text x="14" y="{mid:.0f}" class="unit" transform="rotate(-90 14 {mid:.0f})" '
        f'text-anchor="middle">{_e(chart.unit)}</text>'
    )
    every = max(1, math.ceil(len(points) / 12))
    labels = _axis_labels(points)
    for i, p in enumerate(points):
        if i % every == 0 or p.baseline:
            out.append(
                f'<text x="{x(i):.1f}" y="{H - BOTTOM + 16}" class="tick" text-anchor="middle">'
                f"{_e(labels[i])}</text>"
            )
        if p.baseline:
            out.append(
                f'<line id="baseline-{chart.key}" class="baseline" x1="{x(i):.1f}" x2="{x(i):.1f}" '
                f'y1="{TOP}" y2="{TOP + plot_h}" stroke="{COLORS["baseline"]}" stroke-width="2" '
                f'stroke-dasharray="6 4"><title>baseline: {_e(p.name)}</title></line>'
            )
            out.append(
                f'<text x="{x(i):.1f}" y="{H - BOTTOM + 32}" class="tick baseline-label" '
                f'text-anchor="middle" fill="{COLORS["baseline"]}">baseline</text>'
            )
        if p.status != "ok":
            out.append(
                f'<text x="{x(i):.1f}" y="{TOP + plot_h - 4}" class="failed-mark" text-anchor="middle" '
                f'fill="{COLORS["failed"]}"><title>failed: {_e(p.name)}</title>✕</text>'
            )
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" class="frame"/>')
    for i in range(1, len(points)):
        changed = settings_change(points[i - 1], points[i])
        if changed:  # a new series starts here: the line is not drawn across it
            bx = (x(i - 1) + x(i)) / 2
            out.append(
                f'<line class="settings-break" x1="{bx:.1f}" x2="{bx:.1f}" y1="{TOP}" y2="{TOP + plot_h}" '
                f'stroke="{COLORS["settings"]}" stroke-width="1" stroke-dasharray="2 3">'
                f"<title>settings changed: {_e(', '.join(changed))}</title></line>"
                f'<text x="{bx + 3:.1f}" y="{TOP + 11}" class="tick settings-label" '
                f'fill="{COLORS["settings"]}">settings ≠</text>'
            )
    for s in drawn:
        color = COLORS[s.key]
        out.append(f'<g class="series" data-series="{s.key}">')
        # one line through the runs that have the figure, broken where the settings change (a
        # 128-token probe and a 200-token one are two series): a failed run (its ✕ on the axis)
        # or an older report without the figure is stepped over, not drawn as a zero
        dash = ' stroke-dasharray="7 4"' if s.dashed else ""
        for segment in _segments(s.values, points):
            line = [f"{x(i):.1f},{y(s.values[i].value):.1f}" for i in segment]  # type: ignore[union-attr]
            if len(line) > 1:
                attrs = f'fill="none" stroke="{color}" stroke-width="3"{dash}'
                out.append(f'<polyline points="{" ".join(line)}" {attrs}/>')
        for i, v in enumerate(s.values):
            if v is None:
                continue
            if v.ci95:
                out.append(
                    f'<line class="ci" x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{y(v.value + v.ci95):.1f}" '
                    f'y2="{y(v.value - v.ci95):.1f}" stroke="{color}" stroke-width="1.5"/>'
                )
            ci = f" ± {_fmt(v.ci95)}" if v.ci95 else ""
            unlike = points[i].unlike_baseline
            stopped = points[i].status != "ok"
            # a run not like for like with the baseline is drawn hollow (and says why); a run that
            # did not finish, hollow in the failed colour, off the line
            look = f'fill="#fff" stroke="{color}" stroke-width="2.5"' if unlike else f'fill="{color}"'
            why = f" — not like the baseline: {', '.join(unlike)}" if unlike else ""
            if stopped:
                look = f'fill="#fff" stroke="{COLORS["failed"]}" stroke-width="2.5"'
                why = f" — from a run that ended {points[i].status}: not on the line"
            marks = " unlike" * bool(unlike) + " stopped" * stopped
            out.append(
                f'<circle class="pt{marks}" data-run="{_e(points[i].name)}" '
                f'data-value="{v.value:.6g}" cx="{x(i):.1f}" cy="{y(v.value):.1f}" '
                f'r="{6 if points[i].baseline else 4.5}" {look}>'
                f"<title>{_e(s.label)} — {_e(points[i].name)}: {_fmt(v.value)}{ci} {_e(chart.unit)}{_e(why)}"
                "</title></circle>"
            )
        out.append("</g>")
    if not drawn:
        out.append(
            f'<text x="{LEFT + plot_w / 2:.0f}" y="{TOP + plot_h / 2:.0f}" class="empty" '
            f'text-anchor="middle">{_e(chart.empty_note)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def settings_change(prev: HistoryPoint, cur: HistoryPoint) -> list[str]:
    """The settings keys two consecutive runs differ in (none when either recorded none)."""
    if not prev.settings or not cur.settings:
        return []
    keys = sorted(set(prev.settings) | set(cur.settings))
    return [k for k in keys if prev.settings.get(k) != cur.settings.get(k)]


def _segments(values: Sequence[Figure | None], points: Sequence[HistoryPoint]) -> list[list[int]]:
    """Indices of the runs with a value, split where a run's settings differ from the one before."""
    out: list[list[int]] = []
    last: int | None = None
    for i, v in enumerate(values):
        if v is None or points[i].status != "ok":  # a run that did not finish is a marker, not the line
            continue
        if last is None or any(settings_change(points[j - 1], points[j]) for j in range(last + 1, i + 1)):
            out.append([])
        out[-1].append(i)
        last = i
    return out


def _legend(chart: Chart, points: Sequence[HistoryPoint]) -> str:
    """Every colour and mark the chart drew, named: the series, then the baseline, settings breaks,
    failed runs and their markers (each only when drawn)."""
    swatch = '<span class="key"><span class="swatch" style="background:{}"></span>{}</span>'
    mark = f'<span class="key" style="color:{COLORS["failed"]}">{{}}</span>'
    drawn = {i for s in chart.series for i, v in enumerate(s.values) if v is not None}
    items = [swatch.format(COLORS[s.key], _e(s.label)) for s in chart.series if any(v for v in s.values)]
    if any(p.baseline for p in points):
        items.append(swatch.format(COLORS["baseline"], "baseline (dashed)"))
    if any(settings_change(a, b) for a, b in zip(points, points[1:], strict=False)):
        items.append(swatch.format(COLORS["settings"], "settings changed (dotted): a new line starts"))
    if any(p.status != "ok" for p in points):
        items.append(mark.format("✕ run that failed or was interrupted"))
    if any(points[i].status != "ok" for i in drawn):
        items.append(mark.format("○ what it measured before it stopped"))
    return f'<div class="legend">{"".join(items)}</div>' if items else ""


def charts(points: Sequence[HistoryPoint]) -> list[Chart]:
    tops = sorted({p.top_concurrency for p in points if p.top_concurrency and p.ttft_top_p50_ms})
    top_label = "top c=" + "/".join(str(c) for c in tops) if tops else "top c"
    return [
        Chart(
            "decode",
            "Decode tok/s (decode probe, c=1)",
            "tok/s",
            [Series("decode", "decode tok/s", [p.decode_tps for p in points])],
            "no successful decode probe in these reports",
        ),
        Chart(
            "ttft",
            "TTFT p50 / p99 at c=1 and at the top concurrency level",
            "ms",
            [
                Series("ttft_c1_p50", "c=1 p50", [p.ttft_c1_p50_ms for p in points]),
                Series("ttft_c1_p99", "c=1 p99", [p.ttft_c1_p99_ms for p in points], dashed=True),
                Series("ttft_top_p50", f"{top_label} p50", [p.ttft_top_p50_ms for p in points]),
                Series("ttft_top_p99", f"{top_label} p99", [p.ttft_top_p99_ms for p in points], dashed=True),
            ],
            "no successful concurrency sweep in these reports",
        ),
        Chart(
            "quality",
            "Quality score (tool-eval-bench)",
            "points",
            [Series("quality", "quality score", [p.quality_score for p in points])],
            _quality_note(points),
            y_max=100.0,
        ),
        Chart(
            "roofline",
            "Decode as % of the roofline bound",
            "%",
            [Series("roofline", "% of roofline bound", [p.roofline_decode_pct for p in points])],
            'no roofline section in these reports yet (report["roofline"]["decode"]["pct_of_bound"])',
            y_max=100.0 if all((p.roofline_decode_pct or Figure(0)).value <= 100 for p in points) else None,
        ),
    ]


def _quality_note(points: Sequence[HistoryPoint]) -> str:
    """Why the quality chart is empty: no run started quality, or none finished it (and how each ended)."""
    ended = sorted({p.quality_status for p in points if p.quality_status and p.quality_status != "ok"})
    if not ended:
        return "no quality run in these reports (bench without --quick runs it)"
    started = sum(p.quality_status is not None for p in points)
    return f"no quality run finished in these reports ({started} started; ended {', '.join(ended)})"


def _when(created_utc: str) -> str:
    return created_utc.replace("T", " ").removesuffix("Z")


def _cell(v: Figure | None, unit: str = "") -> str:
    if v is None:
        return "—"
    return _fmt(v.value) + (f" ± {_fmt(v.ci95)}" if v.ci95 else "") + unit


def _settings(s: dict) -> str:
    probe, sweep = s.get("probe") or {}, s.get("sweep") or {}
    parts = []
    if probe:
        parts.append(f"probe {probe.get('prompt_tokens')}→{probe.get('max_tokens')}")
    if sweep.get("levels"):
        per = sweep.get("requests_per_level")
        parts.append(f"c {','.join(str(c) for c in sweep['levels'])}" + (f" ×{per}" if per else ""))
    if s.get("depths") is not None:
        parts.append(f"depths {','.join(str(d) for d in s['depths'])}")
    if s.get("table_runs") is not None:
        parts.append(f"runs {s['table_runs']}")
    if s.get("is_quick"):
        parts.append("quick")
    return "; ".join(parts) or "—"


def _fingerprints(p: HistoryPoint, prev: HistoryPoint | None) -> str:
    if not p.fingerprints:
        return "—"
    lines = []
    changed_any = False
    for host, fp in p.fingerprints.items():
        fp = fp or {}
        before = (prev.fingerprints.get(host) if prev else None) or {}
        if fp.get("error"):
            lines.append(f"<div><b>{_e(host)}</b> not collected: {_e(fp['error'])}</div>")
            continue
        keys = [k for k in fp if k not in VOLATILE_FINGERPRINT_FIELDS]
        changed = [k for k in keys if before and not before.get("error") and before.get(k) != fp.get(k)]
        changed_any |= bool(changed)
        cells = ", ".join(
            f'<span class="{"changed" if k in changed else ""}">{_e(k)} {_e(fp.get(k))}</span>' for k in keys
        )
        lines.append(f"<div><b>{_e(host)}</b> {cells}</div>")
    flag = ' <span class="changed">≠ previous run</span>' if changed_any else ""
    return f"<details><summary>{len(p.fingerprints)} hosts{flag}</summary>{''.join(lines)}</details>"


def _versus(p: HistoryPoint, has_baseline: bool) -> str:
    if p.baseline or not has_baseline:
        return "—"
    if p.unlike_baseline:
        return f'<span class="unlike">≠ {_e(", ".join(p.unlike_baseline))}</span>'
    return "like for like" if p.status == "ok" else "—"


def _links(p: HistoryPoint, link) -> str:
    out = [f'<a href="{_e(link(p.json_path))}">json</a>']
    for suffix, label in ((".md", "md"), (".png", "png")):
        path = p.sibling(suffix)
        if path is not None:
            out.append(f'<a href="{_e(link(path))}">{label}</a>')
    return " ".join(out)


def _table(points: Sequence[HistoryPoint], link) -> str:
    head = (
        "<tr><th>when (UTC)</th><th>report</th><th>status</th><th>decode tok/s</th>"
        "<th>TTFT c=1 p50 / p99 ms</th><th>top c: TTFT p50 / p99 ms</th><th>quality</th>"
        "<th>% roofline</th><th>settings</th><th>vs baseline</th><th>pins</th><th>hosts</th></tr>"
    )
    rows = []
    has_baseline = any(p.baseline for p in points)
    for i, p in enumerate(reversed(points)):  # newest first
        prev_index = len(points) - 2 - i
        prev = points[prev_index] if prev_index >= 0 else None
        cls = " ".join(
            c for c in ("baseline" if p.baseline else "", "failed" if p.status != "ok" else "") if c
        )
        badge = ' <span class="badge">baseline</span>' if p.baseline else ""
        status = (
            "ok"
            if p.status == "ok"
            else f'<span class="bad" title="{_e("; ".join(p.failures))}">{_e(p.status)}</span>'
        )
        pins = "<br>".join(f"{_e(k)} <code>{_e(v[:19])}</code>" for k, v in p.pins.items()) or "—"
        top = (
            f"c={p.top_concurrency}: {_cell(p.ttft_top_p50_ms)} / {_cell(p.ttft_top_p99_ms)}"
            if p.top_concurrency
            else "—"
        )
        rows.append(
            f'<tr class="{cls}" data-run="{_e(p.name)}"><td class="when">{_e(_when(p.created_utc))}</td>'
            f"<td>{_e(p.name)}{badge}<br>{_links(p, link)}</td><td>{status}</td>"
            f"<td>{_cell(p.decode_tps)}</td><td>{_cell(p.ttft_c1_p50_ms)} / {_cell(p.ttft_c1_p99_ms)}</td>"
            f"<td>{top}</td><td>{_cell(p.quality_score)}</td><td>{_cell(p.roofline_decode_pct, ' %')}</td>"
            f"<td>{_e(_settings(p.settings))}</td><td>{_versus(p, has_baseline)}</td><td>{pins}</td>"
            f"<td>{_fingerprints(p, prev)}</td></tr>"
        )
    return f'<table id="runs"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'


CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:16px;margin:22px 0 4px}
.meta{color:#555;margin-bottom:8px}
svg.chart{display:block;background:#fff}
.grid{stroke:#e6e6e6;stroke-width:1}.frame{fill:none;stroke:#444;stroke-width:1}
.tick{font-size:11px;fill:#444}.unit{font-size:12px;fill:#444}.empty{font-size:14px;fill:#777}
.failed-mark{font-size:14px;font-weight:bold}
.legend{margin:2px 0 0 64px}.key{margin-right:16px;white-space:nowrap}
.swatch{display:inline-block;width:14px;height:10px;margin-right:5px;vertical-align:middle}
table{border-collapse:collapse;margin-top:8px;font-size:12.5px}
th,td{border:1px solid #ddd;padding:4px 6px;vertical-align:top;text-align:left}
th{background:#f4f4f4}tr.baseline{background:#fff4e6}tr.failed td{color:#999}
.badge{background:#ff7f0e;color:#fff;border-radius:3px;padding:0 5px;font-size:11px}
.bad{color:#b00;font-weight:bold}.changed{background:#ffe08a}.unlike{color:#8a5a00}
td.when{white-space:nowrap}code{font-size:11.5px}details div{margin-left:8px;white-space:nowrap}
"""


def render_page(
    lane: str, points: Sequence[HistoryPoint], link, generated_utc: str, baseline: str | None
) -> str:
    """The whole page. `link(path)` turns a report file into an href relative to the page."""
    ok = sum(p.status == "ok" for p in points)
    if baseline and not any(p.baseline for p in points):
        base_note = f"baseline {_e(baseline)} is not among these reports"
    elif baseline:
        base_note = f"baseline: {_e(baseline)} (dashed line)"
    else:
        base_note = 'no baseline declared (recipe [bench] baseline = "&lt;report name&gt;")'
    body = [
        f"<h1>sparkfleet — {_e(lane)}</h1>",
        f'<div class="meta">{len(points)} reports ({ok} ok, {len(points) - ok} failed), oldest left; '
        f"{base_note}; generated {_e(generated_utc)}</div>",
    ]
    for chart in charts(points):
        body += [
            f'<h2 id="title-{chart.key}">{_e(chart.title)}</h2>',
            svg_chart(chart, points),
            _legend(chart, points),
        ]
    body += ["<h2>Runs (newest first)</h2>", _table(points, link)]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>sparkfleet — {_e(lane)} history</title><style>{CSS}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )


def write_page(lane: str, reports_dir: Path, baseline: str | None, out: Path) -> HistoryPage:
    """Render the lane's history page to `out` (atomically); links are relative to `out`."""
    points = lane_history(reports_dir, baseline)
    generated = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    page = render_page(lane, points, lambda path: relative_link(path, out), generated, baseline)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(out, page.encode())
    return HistoryPage(out, lane, len(points), sum(p.status == "ok" for p in points), baseline)


@dataclass(frozen=True)
class HistoryPage:
    path: Path
    lane: str
    reports: int
    ok: int
    baseline: str | None
