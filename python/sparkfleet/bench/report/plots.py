"""The PNG view of a report document: matplotlib, headless (Agg), imported only when drawing.

Up to three panels, each only when there is something to draw:
- tok/s vs concurrency (aggregate and per-request p50), concurrency on a log2 axis with one tick
  per measured level and nothing between (no fractional "requests");
- TTFT per concurrency level: one box per level from that level's own samples — pooling the levels
  would mix a queue at c=16 into the latency at c=1;
- pp and tg (llama-bench style), each its own panel (prefill runs 100x faster than decode: on one
  axis the tg bars vanish): one bar per row, with its ± (ci95 when recorded, else the standard
  deviation); a failed row keeps its place and says "failed".
Every value axis starts at zero, so a 2 % wobble does not look like a cliff. Artists a reader (or
a test) may want to find carry a gid: `ttft-median-c<N>`, `bar-<test>@d<depth>`.
"""

from __future__ import annotations

import io
from typing import Any

from .compare import number

SERIES = {"aggregate": "#1f77b4", "per_request": "#ff7f0e", "pp": "#2ca02c", "tg": "#9467bd"}


def _ok_levels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [lv for lv in doc.get("sweep") or [] if number(lv.get("aggregate_tps")) is not None]


def _spread(row: dict[str, Any]) -> float:
    """The row's ±: its 95 % CI half-width (`tps_ci95`, or `ci95` of a {mean, ci95} figure), else its
    standard deviation (reports from before CIs), else nothing."""
    if isinstance(row.get("tps_ci95"), int | float):
        return float(row["tps_ci95"])
    mean = row.get("tps_mean")
    if isinstance(mean, dict) and isinstance(mean.get("ci95"), int | float):
        return float(mean["ci95"])
    std = row.get("tps_std")
    return float(std) if isinstance(std, int | float) else 0.0


def _tps_panel(ax: Any, levels: list[dict[str, Any]]) -> None:
    from matplotlib.ticker import FixedLocator, NullLocator

    conc = [lv["concurrency"] for lv in levels]
    ax.plot(
        conc,
        [number(lv["aggregate_tps"]) for lv in levels],
        "o-",
        color=SERIES["aggregate"],
        label="aggregate",
    )
    per = [
        (lv["concurrency"], number(lv["per_request_tps"]["p50"]))
        for lv in levels
        if lv.get("per_request_tps")
    ]
    if per:
        ax.plot(
            [c for c, _ in per],
            [v for _, v in per],
            "s--",
            color=SERIES["per_request"],
            label="per request (p50)",
        )
    if len(conc) > 1:
        ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(conc))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(conc, [str(c) for c in conc])
    ax.set_xlabel("concurrency")
    ax.set_ylabel("output tok/s")
    ax.set_title("tok/s vs concurrency")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()


def _ttft_panel(ax: Any, levels: list[dict[str, Any]]) -> None:
    drawn = [lv for lv in levels if lv.get("ttft_samples_s")]
    data = [[t * 1000 for t in lv["ttft_samples_s"]] for lv in drawn]
    boxes = ax.boxplot(data, positions=range(1, len(drawn) + 1), widths=0.6, showfliers=True)
    for lv, median in zip(drawn, boxes["medians"], strict=True):
        median.set_gid(f"ttft-median-c{lv['concurrency']}")
    ax.set_xticks(range(1, len(drawn) + 1), [str(lv["concurrency"]) for lv in drawn])
    ax.set_xlabel("concurrency (one box per level: its own requests)")
    ax.set_ylabel("TTFT (ms)")
    n = ", ".join(f"{len(lv['ttft_samples_s'])}" for lv in drawn)
    ax.set_title(f"TTFT per concurrency level (requests: {n})")
    ax.set_ylim(bottom=0)
    ax.grid(True, axis="y", alpha=0.3)


def _table_panel(ax: Any, rows: list[dict[str, Any]], kind: str) -> None:
    labels = [f"{r['test']}@d{r['depth']}" for r in rows]
    top = 0.0
    for i, (label, row) in enumerate(zip(labels, rows, strict=True)):
        value = number(row.get("tps_mean"))
        if value is None or row.get("error"):
            ax.text(i, 0, "failed", ha="center", va="bottom", color="#d62728", fontweight="bold")
            continue
        (bar,) = ax.bar(i, value, color=SERIES[kind], width=0.6)
        bar.set_gid(f"bar-{label}")
        top = max(top, value + _spread(row))
    measured = [
        (i, number(r.get("tps_mean")), _spread(r))
        for i, r in enumerate(rows)
        if number(r.get("tps_mean")) is not None and not r.get("error")
    ]
    if measured:
        ax.errorbar(
            [i for i, _, _ in measured],
            [v for _, v, _ in measured],
            yerr=[e for _, _, e in measured],
            fmt="none",
            ecolor="black",
            capsize=4,
        )
    ax.set_xticks(range(len(rows)), labels)
    ax.set_ylabel("prompt tok/s" if kind == "pp" else "output tok/s")
    ax.set_title(f"{kind} ({'prefill' if kind == 'pp' else 'decode'}), ± ci95 or stdev")
    ax.set_ylim(bottom=0, top=(top * 1.1) or 1)
    ax.grid(True, axis="y", alpha=0.3)


def build_figure(doc: dict[str, Any]) -> Any | None:
    """The report's figure (matplotlib Figure), or None when there is nothing to draw."""
    levels = _ok_levels(doc)
    rows = doc.get("table") or []
    panels = []
    if levels:
        panels.append(("tps", levels))
        if any(lv.get("ttft_samples_s") for lv in levels):
            panels.append(("ttft", levels))
    for kind in ("pp", "tg"):
        mine = [r for r in rows if str(r.get("test", "")).startswith(kind)]
        if any(number(r.get("tps_mean")) is not None for r in mine):
            panels.append((kind, mine))
    if not panels:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.4), squeeze=False)
    for ax, (kind, data) in zip(axes[0], panels, strict=True):
        if kind == "tps":
            _tps_panel(ax, data)
        elif kind == "ttft":
            _ttft_panel(ax, data)
        else:
            _table_panel(ax, data, kind)
    fig.suptitle(f"{doc.get('lane') or doc.get('url')} — {doc.get('tag')} — {doc.get('created_utc')}")
    fig.tight_layout()
    return fig


def render_png(doc: dict[str, Any]) -> bytes | None:
    """The figure as PNG bytes; None when there is nothing to draw."""
    fig = build_figure(doc)
    if fig is None:
        return None
    from matplotlib import pyplot as plt

    try:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        return buf.getvalue()
    finally:
        plt.close(fig)
