"""The PNG view of a report document: matplotlib, headless (Agg), imported only when drawing."""

from __future__ import annotations

import io
from typing import Any


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
