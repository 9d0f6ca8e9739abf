"""Supervised serving: a known-answer generation every interval; incident bundle, restart, or a human.

Why: an engine can answer /health while generation is wedged (a stuck NCCL collective, a dead
scheduler thread); only a real generation shows it. So the supervisor asks a tiny question with a
known answer (the recipe's smoke case) every `interval_s` with a latency bound `latency_s <=
interval_s`: a wedge that starts at any moment is seen by the next probe, at most two intervals
later. On failure it collects a bundle from every rank into recipes/<lane>/incidents/<UTC>/ (log
tail, dmesg, nvidia-smi -q, the launch record, env with secrets redacted, the boot stage reached,
the memory watchdog's verdict), then restarts the lane, at most `max_restarts` times in `window_s`
with exponential backoff. Past that budget it stops the lane and says a human is needed: restarting
forever hides the problem and can take the host down with it.

The loop is pure over injected callables (probe, collect, restart, stop, clock, sleep); the CLI
wires them to the real lane.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..atomic import write_bytes
from ..errors import SparkfleetError
from ..inventory import RECIPES_DIR


@dataclass(frozen=True)
class WatchSettings:
    interval_s: float = 30.0
    latency_s: float = 20.0  # one probe's bound; never above interval_s
    prompt: str = "What is 19+23? Answer with the number only."
    expect: str = "42"
    max_tokens: int = 512
    max_restarts: int = 3
    window_s: float = 3600.0
    backoff_s: float = 10.0


def watch_settings(raw: dict, **override: Any) -> WatchSettings:
    """[watch] of the recipe (prompt/expect default to its first smoke case), then CLI overrides."""
    doc = dict(raw.get("watch", {}))
    smoke = raw.get("smoke", {})
    cases = smoke.get("cases") or []
    if cases and "prompt" not in doc:
        doc["prompt"], doc["expect"] = cases[0]["prompt"], cases[0]["expect"]
    if "max_tokens" in smoke:
        doc.setdefault("max_tokens", smoke["max_tokens"])
    doc.update({k: v for k, v in override.items() if v is not None})
    s = WatchSettings(**{k: v for k, v in doc.items() if k in WatchSettings.__dataclass_fields__})
    if s.latency_s > s.interval_s:
        raise SparkfleetError(
            f"watch latency bound {s.latency_s:g} s is longer than the interval {s.interval_s:g} s",
            hint="a wedge must be caught within two intervals: keep latency_s <= interval_s",
        )
    return s


@dataclass
class ProbeResult:
    ok: bool
    latency_s: float
    answer: str | None = None
    error: str | None = None


def probe_generation(url: str, model: str, s: WatchSettings, api_key: str | None = None) -> ProbeResult:
    """POST one chat completion (temperature 0) and check the known answer within the latency bound."""
    from ..bench.probes import answer_matches

    body = json.dumps({"model": model, "messages": [{"role": "user", "content": s.prompt}],
                       "temperature": 0, "max_tokens": s.max_tokens, "stream": False}).encode()  # fmt: skip
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url.rstrip("/") + "/chat/completions", body, headers)
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=s.latency_s) as resp:
            doc = json.loads(resp.read())
    except (urllib.error.URLError, OSError, TimeoutError, ValueError) as exc:
        took = time.monotonic() - t0
        what = "no answer within the latency bound" if took >= s.latency_s * 0.95 else str(exc)
        return ProbeResult(False, took, None, f"{what} ({type(exc).__name__})")
    took = time.monotonic() - t0
    try:
        answer = doc["choices"][0]["message"].get("content") or ""
    except (KeyError, IndexError, TypeError, AttributeError):
        return ProbeResult(False, took, None, "malformed completion")
    if took > s.latency_s:
        return ProbeResult(False, took, answer, f"answered in {took:.1f} s, bound {s.latency_s:g} s")
    if not answer_matches(answer, s.expect):
        return ProbeResult(
            False, took, answer, f"wrong answer {answer.strip()[:60]!r}, expected {s.expect!r}"
        )
    return ProbeResult(True, took, answer)


@dataclass
class Incident:
    at: float
    reason: str
    bundle: str | None
    restarted: bool
    restart_ok: bool | None = None


@dataclass
class WatchOutcome:
    lane: str
    probes: int
    failures: int
    incidents: list[Incident] = field(default_factory=list)
    restarts: int = 0
    needs_human: bool = False
    message: str = ""
    detect_s: list[float] = field(default_factory=list)  # last good probe end -> failure seen


class Supervisor:
    """The probe/incident/restart loop with a restart budget (at most K restarts in T, with backoff)."""

    def __init__(
        self,
        lane: str,
        settings: WatchSettings,
        probe: Callable[[], ProbeResult],
        collect: Callable[[str], str | None],
        restart: Callable[[], bool],
        stop: Callable[[], Any],
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        on_event: Callable[[str], None] = lambda _m: None,
        hold: Callable[[], str | None] = lambda: None,
    ) -> None:
        """`hold()` names a reason a restart must not be tried (the memory watchdog fired), else None."""
        self.hold = hold
        self.lane, self.s = lane, settings
        self.probe, self.collect, self.restart, self.stop = probe, collect, restart, stop
        self.clock, self.sleep, self.on_event = clock, sleep, on_event
        self.restarts: deque[float] = deque()

    def budget_left(self, now: float) -> int:
        while self.restarts and now - self.restarts[0] > self.s.window_s:
            self.restarts.popleft()
        return self.s.max_restarts - len(self.restarts)

    def run(self, max_probes: int | None = None) -> WatchOutcome:
        out = WatchOutcome(self.lane, 0, 0)
        last_ok_end: float | None = None
        while max_probes is None or out.probes < max_probes:
            start = self.clock()
            res = self.probe()
            out.probes += 1
            if res.ok:
                last_ok_end = self.clock()
                self.sleep(max(0.0, self.s.interval_s - (last_ok_end - start)))
                continue
            out.failures += 1
            seen = self.clock()
            if last_ok_end is not None:
                out.detect_s.append(seen - last_ok_end)
            reason = f"generation probe failed: {res.error}"
            self.on_event(f"{self.lane}: {reason}; collecting an incident bundle")
            bundle = self.collect(reason)
            held = self.hold()
            if held or self.budget_left(seen) <= 0:
                self.stop()
                out.incidents.append(Incident(time.time(), reason, bundle, False))
                out.needs_human = True
                why = held or (
                    f"{len(self.restarts)} restarts in the last {self.s.window_s:g} s did not keep it healthy"
                )
                out.message = f"{self.lane}: {why}; the lane is stopped and needs a human (bundle: {bundle})"
                self.on_event(out.message)
                return out
            backoff = self.s.backoff_s * (2 ** len(self.restarts))
            self.on_event(
                f"{self.lane}: restarting in {backoff:g} s ({self.budget_left(seen)} restarts left)"
            )
            self.sleep(backoff)
            self.restarts.append(self.clock())
            ok = self.restart()
            out.restarts += 1
            out.incidents.append(Incident(time.time(), reason, bundle, True, ok))
            last_ok_end = None
            self.on_event(f"{self.lane}: restart {'came up' if ok else 'FAILED'}")
        return out


def incident_dir(root: Path, lane: str, t: float | None = None) -> Path:
    t = time.time() if t is None else t
    return root / RECIPES_DIR / lane / "incidents" / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(t))


def write_bundle(root: Path, lane: str, reason: str, per_host: dict[str, dict], extra: dict) -> Path:
    """recipes/<lane>/incidents/<UTC>/: summary.json + per host and rank the pieces as plain files."""
    d = incident_dir(root, lane)
    n = 1
    while d.exists():
        d = d.with_name(d.name.split("-")[0] + f"-{n}")
        n += 1
    d.mkdir(parents=True)
    summary = {"lane": lane, "reason": reason, "at": time.time(), "hosts": sorted(per_host), **extra}
    for host, b in per_host.items():
        if "error" in b:
            write_bytes(d / f"{host}.error.txt", str(b["error"]).encode())
            continue
        write_bytes(d / f"{host}.dmesg.txt", str(b.get("dmesg", "")).encode())
        write_bytes(d / f"{host}.nvidia-smi-q.txt", str(b.get("nvidia_smi_q", "")).encode())
        write_bytes(d / f"{host}.meminfo.txt", str(b.get("meminfo", "")).encode())
        for r in b.get("ranks", []):
            stem = f"{host}.rank{r['rank']}"
            write_bytes(d / f"{stem}.log", str(r.get("log_tail", "")).encode())
            meta = {k: r.get(k) for k in ("rank", "running", "returncode", "boot_stage", "record", "env")}
            write_bytes(d / f"{stem}.json", json.dumps(meta, indent=1).encode(), mode=0o600)
        if b.get("memstop"):
            summary.setdefault("memstop", {})[host] = b["memstop"]
    write_bytes(d / "summary.json", json.dumps(summary, indent=1).encode())
    return d


# ---- wiring to a real lane ----------------------------------------------------------------------


def collect_incident(inv, lane_name: str, reason: str, root: Path | None = None) -> Path:
    """Ask every host of the lane for its bundle (in parallel) and write them under incidents/."""
    from ..hosts import connect
    from .generations import current
    from .lane import call_agent, parallel, state_request
    from .recipe import launch_recipe

    lane = inv.lane(lane_name)
    recipe = launch_recipe(inv, lane_name)

    def one(host: str) -> dict:
        req = state_request(inv, lane_name, host, lines=200, signatures=list(recipe.ready_signatures))
        try:
            return call_agent(connect(inv.host(host)), "incident", req, timeout=180)
        except SparkfleetError as exc:
            return {"error": exc.message}

    per_host = dict(zip(lane.hosts, parallel(one, list(lane.hosts)), strict=True))
    gen = current(root or inv.root, lane_name)
    extra = {"generation": gen["id"] if gen else None}
    return write_bundle(root or inv.root, lane_name, reason, per_host, extra)


def watch_lane(
    inv,
    lane_name: str,
    settings: WatchSettings,
    max_probes: int | None = None,
    allow_drift: bool = False,
    on_event: Callable[[str], None] = lambda _m: None,
) -> WatchOutcome:
    """Supervise a running lane: the real probe, bundle collection and relaunch."""
    from ..bench.target import for_lane
    from .generations import current
    from .lane import launch, status, stop
    from .recipe import launch_recipe

    target = for_lane(inv, lane_name)
    recipe = launch_recipe(inv, lane_name)
    model = recipe.served_model_name or lane_name

    def restart() -> bool:
        try:
            stop(inv, lane_name, recipe.timeouts.stop_s)
            # A generation the operator let through with --allow-nas-weights is restarted the same way.
            nas = bool((current(inv.root, lane_name) or {}).get("nas_weights"))
            rep = launch(inv, lane_name, allow_drift=allow_drift, on_event=on_event, allow_nas_weights=nas)
            return bool(rep.ready and rep.ready.ok)
        except SparkfleetError as exc:
            on_event(f"{lane_name}: relaunch refused: {exc.message}")
            return False

    def probe() -> ProbeResult:
        """The known answer in time, and every rank alive (a head can answer while a worker is gone)."""
        res = probe_generation(target.url, model, settings, target.api_key())
        if not res.ok:
            return res
        st = status(inv, lane_name)
        if st["running"] < st["expected"]:
            down = [f"rank {r['rank']} on {r['host']}" for r in st["ranks"] if not r["running"]]
            why = "; ".join([*down, *(e["error"] for e in st["errors"])])
            return ProbeResult(False, res.latency_s, res.answer,
                               f"{st['running']} of {st['expected']} ranks running ({why})")  # fmt: skip
        return res

    def hold() -> str | None:
        """A node's memory watchdog stopped ranks: relaunching into memory pressure locks hosts up."""
        errs = [e for e in status(inv, lane_name)["errors"] if e["error"].startswith("memory watchdog:")]
        return "; ".join(f"{e['host']}: {e['error']}" for e in errs) or None

    sup = Supervisor(
        lane_name,
        settings,
        hold=hold,
        probe=probe,
        collect=lambda reason: str(collect_incident(inv, lane_name, reason)),
        restart=restart,
        stop=lambda: stop(inv, lane_name, recipe.timeouts.stop_s),
        on_event=on_event,
    )
    return sup.run(max_probes)
