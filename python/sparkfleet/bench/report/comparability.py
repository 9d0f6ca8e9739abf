"""Whether two reports measured the same thing: settings, host fingerprints, recipe, pins.

A comparison of a 128-token probe with a 487-token one reads as a +270 % TTFT "regression"; a
driver update between two runs reads as a change of the lane. So before any delta is computed the
two documents are checked for what defines comparability:

- settings (the report's `settings` dict, flattened to dotted keys such as `probe.prompt_tokens`):
  a difference in a setting that shapes a metric both reports carry blocks the comparison;
- host fingerprints (`fingerprints: {host: HostFingerprint.to_dict()}`): a different host set or a
  different kernel, driver, CUDA, NCCL, firmware, GPU clocks, power mode or image ID blocks it
  (free memory is expected to move and is not compared);
- recipe sha256, pins and whether speculative decoding reported anything: noted, never blocking —
  comparing two versions of a lane is what a comparison is for.

Something recorded in only one report (an older report without fingerprints, a setting a newer
version added) is noted as unknown, not blocking: there is nothing to say it differs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Fingerprint fields that move between runs of the very same stack.
VOLATILE_FINGERPRINT_FIELDS = frozenset({"host", "mem_available_bytes", "error"})

# Settings that shape no compared figure: part of the metric names (pp512@d4096), a pass/fail gate,
# or how often the spec-decoding gauge is sampled.
NAMED_OR_NEUTRAL = frozenset({"pp", "tg", "depths", "smoke", "spec_sample_s"})

# Metric families: which part of a run produced a key metric.
PROBE, TABLE, SWEEP, QUALITY = "probe", "table", "sweep", "quality"


@dataclass(frozen=True)
class Mismatch:
    kind: str  # setting | fingerprint | recipe | pin | spec
    key: str  # e.g. probe.prompt_tokens, dgx1.driver, recipe_sha256
    base: Any
    new: Any
    blocking: bool  # the figures measure different things (compare refuses unless forced)

    def line(self) -> str:
        what = "differs" if self.blocking else "noted"
        return f"{self.kind} {self.key}: {_show(self.base)} → {_show(self.new)} ({what})"


def _show(value: Any) -> str:
    if value is None:
        return "unknown"
    text = str(value)
    return text if len(text) <= 24 else text[:21] + "…"


def metric_family(name: str) -> str | None:
    if name in ("decode_tps", "ttft_s"):
        return PROBE
    if name.startswith(("pp", "tg")):
        return TABLE
    if name.startswith("aggregate_tps"):
        return SWEEP
    if name == "quality_score":
        return QUALITY
    return None


def setting_scope(key: str) -> str | None:
    """Which metric family a setting shapes: a family, "all", or None (it shapes no figure).

    The pp/tg sizes, depths and sweep levels are part of the metric names (pp512@d4096,
    aggregate_tps@c4): a row measured in both reports is the same test whatever else was run.
    Settings this module does not know (a newer bench's) are taken to shape every figure."""
    head = key.split(".", 1)[0]
    if key.endswith("timeout_s") or key == "sweep.levels" or head in NAMED_OR_NEUTRAL:
        return None
    return {"probe": PROBE, "sweep": SWEEP, "quality": QUALITY, "table_runs": TABLE}.get(head, "all")


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    if isinstance(value, list):
        value = tuple(value)
    return {prefix.rstrip("."): value}


def _settings(base: dict[str, Any], new: dict[str, Any], families: set[str]) -> list[Mismatch]:
    b, n = flatten(base.get("settings") or {}), flatten(new.get("settings") or {})
    out = []
    for key in sorted(b.keys() | n.keys()):
        scope = setting_scope(key)
        if scope is None or b.get(key) == n.get(key):
            continue
        known = key in b and key in n
        shapes = scope == "all" or scope in families
        out.append(Mismatch("setting", key, b.get(key), n.get(key), known and shapes))
    return out


def _fingerprints(base: dict[str, Any], new: dict[str, Any]) -> list[Mismatch]:
    b, n = base.get("fingerprints") or {}, new.get("fingerprints") or {}
    if not b or not n:
        if b or n:
            return [Mismatch("fingerprint", "*", "recorded" if b else None, "recorded" if n else None, False)]
        return []
    out = []
    for host in sorted(b.keys() | n.keys()):
        if host not in b or host not in n:
            seen = ("present" if host in b else None), ("present" if host in n else None)
            out.append(Mismatch("fingerprint", host, *seen, True))
            continue
        fb, fn = b[host] or {}, n[host] or {}
        unknown = "error" in fb or "error" in fn  # collection failed on one side: nothing to compare
        for field in sorted((fb.keys() | fn.keys()) - VOLATILE_FINGERPRINT_FIELDS):
            if fb.get(field) != fn.get(field):
                both = field in fb and field in fn
                blocking = both and not unknown
                out.append(Mismatch("fingerprint", f"{host}.{field}", fb.get(field), fn.get(field), blocking))
    return out


def _noted(base: dict[str, Any], new: dict[str, Any]) -> list[Mismatch]:
    out = []
    if base.get("recipe_sha256") != new.get("recipe_sha256"):
        out.append(
            Mismatch("recipe", "recipe_sha256", base.get("recipe_sha256"), new.get("recipe_sha256"), False)
        )
    pb, pn = base.get("pins") or {}, new.get("pins") or {}
    for name in sorted(pb.keys() | pn.keys()):
        vb, vn = (pb.get(name) or {}).get("value"), (pn.get(name) or {}).get("value")
        if vb != vn:
            out.append(Mismatch("pin", name, vb, vn, False))
    sb, sn = base.get("spec_accept") is not None, new.get("spec_accept") is not None
    if sb != sn:
        out.append(
            Mismatch("spec", "spec_accept", "reported" if sb else "none", "reported" if sn else "none", False)
        )
    return out


def mismatches(base: dict[str, Any], new: dict[str, Any], families: set[str]) -> list[Mismatch]:
    """Everything that differs between two report documents; `families` are the metric families
    both carry (a setting that shapes only figures one of them lacks does not block)."""
    return _settings(base, new, families) + _fingerprints(base, new) + _noted(base, new)


def affects(mismatch: Mismatch, metric: str) -> bool:
    """Whether a blocking mismatch makes this metric incomparable."""
    if not mismatch.blocking:
        return False
    if mismatch.kind != "setting":
        return True
    scope = setting_scope(mismatch.key)
    return scope == "all" or scope == metric_family(metric)
