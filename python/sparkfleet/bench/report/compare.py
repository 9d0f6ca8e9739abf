"""Comparing two report documents: key metrics against the lane's thresholds.

A comparison first checks that the two reports measured the same thing (comparability: settings,
host fingerprints); if not it refuses — no deltas, no "regression" — unless forced, and then every
delta a differing setting or fingerprint touches is marked. Otherwise it checks a fixed set of key
metrics against thresholds (the lane's [bench.thresholds]) and says which ones regressed; a failed
run always counts as a regression — it has no numbers to compare.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ...base.errors import ExitCode
from .comparability import Mismatch, affects, metric_family, mismatches


def number(value: Any) -> float | None:
    """A figure as one number: a plain value, or the mean of a repeated one ({"mean", "ci95", ...}).

    NaN and ±Infinity (which Python's JSON reader accepts) are not figures: they read as absent,
    like a string or a bool, so one odd report cannot break a comparison or a page.
    """
    if isinstance(value, dict):
        value = value.get("mean")
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return value
    return None


def key_metrics(doc: dict[str, Any]) -> dict[str, float | None]:
    """The numbers a comparison looks at, by stable names (a `*pct_of_bound` is shown, not judged)."""
    out: dict[str, float | None] = {}
    roof = doc.get("roofline") if isinstance(doc.get("roofline"), dict) else {}
    if isinstance(roof.get("decode"), dict):
        out["decode_pct_of_bound"] = number(roof["decode"].get("pct_of_bound"))
    for p in roof.get("prefill") or []:
        if isinstance(p, dict):
            out[f"{p.get('test')}@d{p.get('depth')}_pct_of_bound"] = number(p.get("pct_of_bound"))
    probe = (doc.get("decode_probe") or {}).get("metrics") or {}
    out["decode_tps"] = number(probe.get("decode_tps"))
    out["ttft_s"] = number(doc.get("ttft") or probe.get("ttft_s"))  # repeated (with a CI) in newer reports
    for row in doc.get("table") or []:
        out[f"{row['test']}@d{row['depth']}"] = number(row.get("tps_mean"))
    for lv in doc.get("sweep") or []:
        out[f"aggregate_tps@c{lv['concurrency']}"] = number(lv.get("aggregate_tps"))
    q = doc.get("quality") or {}
    out["quality_score"] = number(q.get("score")) if q.get("status") == "ok" else None
    return out


def key_intervals(doc: dict[str, Any]) -> dict[str, float]:
    """95 % CI half-widths of the key metrics that were repeated (a table row's `tps_ci95`, or the
    `ci95` of a {mean, ci95} figure); metrics measured once have none."""
    out: dict[str, float] = {}

    def put(name: str, value: Any, flat: Any = None) -> None:
        ci = flat if flat is not None else (value.get("ci95") if isinstance(value, dict) else None)
        if isinstance(ci, int | float) and not isinstance(ci, bool):
            out[name] = float(ci)

    probe = (doc.get("decode_probe") or {}).get("metrics") or {}
    put("decode_tps", probe.get("decode_tps"))
    put("ttft_s", doc.get("ttft") or probe.get("ttft_s"))
    for row in doc.get("table") or []:
        put(f"{row['test']}@d{row['depth']}", row.get("tps_mean"), row.get("tps_ci95"))
    for lv in doc.get("sweep") or []:
        put(f"aggregate_tps@c{lv['concurrency']}", lv.get("aggregate_tps"))
    return out


@dataclass(frozen=True)
class MetricDelta:
    name: str
    base: float | None
    new: float | None
    change_pct: float | None
    limit: str
    regression: bool
    differs: tuple[str, ...] = ()  # settings/fingerprint keys that differ for this metric (forced)
    # both figures carry a 95 % CI: is the change inside what their noise allows? (None: unknown)
    within_noise: bool | None = None


@dataclass(frozen=True)
class Comparison:
    base: str
    new: str
    deltas: list[MetricDelta]
    regressions: list[str]
    mismatches: list[Mismatch] = field(default_factory=list)
    refused: bool = False  # blocking mismatches or a failed run, and not forced: no deltas computed
    forced: bool = False
    failed: list[str] = field(default_factory=list)  # "<name> failed: …" for each side that failed

    @property
    def ok(self) -> bool:
        return not self.regressions and not self.refused

    @property
    def blocking(self) -> list[Mismatch]:
        return [m for m in self.mismatches if m.blocking]

    @property
    def exit_code(self) -> ExitCode:
        """REFUSED when the two measured different things (settings or hosts) and it was not forced,
        even if the newer run also failed: there is no like-for-like pair, and --force is the answer.
        Else SHORTFALL for a failed newer run or a regression, REFUSED for a failed base, OK."""
        if self.refused and self.blocking:
            return ExitCode.REFUSED
        if self.regressions:
            return ExitCode.SHORTFALL
        return ExitCode.REFUSED if self.refused else ExitCode.OK


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
    base: dict[str, Any],
    new: dict[str, Any],
    thresholds: Any,
    base_name: str = "base",
    new_name: str = "new",
    *,
    force: bool = False,
) -> Comparison:
    """Deltas and regressions of `new` against `base`. The same rule for every pair: refused (no
    deltas) unless `force` when they measured different things or either run failed (a failed run's
    figures are not like for like with a good one's). A failed `new` is a regression all the same,
    refused or not: refusing must never hide it."""
    regressions = []
    b, n = key_metrics(base), key_metrics(new)
    ci_b, ci_n = key_intervals(base), key_intervals(new)
    both = {metric_family(k) for k, v in b.items() if v is not None and n.get(k) is not None}
    found = mismatches(base, new, {f for f in both if f})
    failed = [
        f"{name} {doc.get('status', 'failed')}: {'; '.join(doc.get('failures') or ['unknown'])}"
        for name, doc in ((base_name, base), (new_name, new))
        if doc.get("status") != "ok"
    ]
    if new.get("status") != "ok":
        regressions.append(failed[-1])
    if (failed or any(m.blocking for m in found)) and not force:
        return Comparison(base_name, new_name, [], regressions, found, refused=True, failed=failed)
    deltas = []
    for name in b:
        rule = _rule(name, thresholds)
        if name.endswith("pct_of_bound") and b[name] is not None:
            # Shown side by side, not judged: the measured rates carry the thresholds.
            cur = n.get(name)
            change = (cur - b[name]) / b[name] * 100 if cur is not None and b[name] else None
            deltas.append(MetricDelta(name, b[name], cur, change, "shown", False))
            continue
        if rule is None or b[name] is None:
            continue
        direction, allowed = rule
        limit = {"drop_points": f"-{allowed:g} points", "drop_pct": f"-{allowed:g}%"}.get(
            direction, f"+{allowed:g}%"
        )
        old, cur = b[name], n.get(name)
        differs = tuple(m.key for m in found if affects(m, name))
        if cur is None:  # absent: not measured this time (other settings); None: the step failed
            deltas.append(MetricDelta(name, old, None, None, limit, name in n, differs))
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
        noise = None
        if name in ci_b and name in ci_n:  # difference of two means: half-widths add in quadrature
            noise = abs(cur - old) <= (ci_b[name] ** 2 + ci_n[name] ** 2) ** 0.5
        deltas.append(MetricDelta(name, old, cur, change, limit, bad, differs, noise))
        if bad:
            what = f"{cur - old:+.1f} points" if direction == "drop_points" else f"{change:+.1f}%"
            marked = f"; {'forced, ' if force else ''}{', '.join(differs)} differ" if differs else ""
            marked += "; within the 95 % CIs of both runs: may be noise" if noise else ""
            regressions.append(f"{name}: {old:.4g} → {cur:.4g} ({what}, limit {limit}{marked})")
    return Comparison(base_name, new_name, deltas, regressions, found, forced=force, failed=failed)
