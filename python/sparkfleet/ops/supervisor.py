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

import http.client
import json
import os
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..base.atomic import ensure_dir, write_bytes
from ..base.errors import ExitCode, SparkfleetError
from ..base.sanitize import Secrets
from ..bench.target import for_lane
from ..fleet.inventory import RECIPES_DIR
from ..fleet.sections import RecipeSections
from ..lane.spec import secret_values
from ..launch.generations import current, scan
from ..launch.lane import Gates, lane_status, launch_lane, status, stop_lane
from ..launch.lanerun import LaneRun, lane_run
from ..launch.lanestop import status_enforced
from ..launch.plan import dry_run
from ..node.protocol import IncidentRequest
from ..remote.hosts import fan_out
from ..remote.nodecall import ask_host, lane_request
from ..remote.wire import ErrorKind
from . import watchstate


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


def watch_settings(sections: RecipeSections, **override: Any) -> WatchSettings:
    """[watch] of the recipe (prompt/expect default to its first smoke case), then CLI overrides."""
    doc = {k: v for k, v in asdict(sections.watch).items() if v is not None}
    smoke = sections.smoke
    if smoke.cases and "prompt" not in doc:
        doc["prompt"], doc["expect"] = smoke.cases[0].prompt, smoke.cases[0].expect
    if smoke.max_tokens is not None:
        doc.setdefault("max_tokens", smoke.max_tokens)
    doc.update({k: v for k, v in override.items() if v is not None})
    if "latency_s" not in doc and "interval_s" in doc:
        # only the interval was chosen: the built-in latency bound shrinks to fit it, so
        # `--interval 10` works as written; a bound someone chose is never changed behind them
        doc["latency_s"] = min(WatchSettings.latency_s, float(doc["interval_s"]))
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


MAX_PROBE_BYTES = 1 << 20  # a known-answer completion is a few hundred bytes


def probe_generation(url: str, model: str, s: WatchSettings, api_key: str | None = None) -> ProbeResult:
    """POST one chat completion (temperature 0) and check the known answer within the latency bound.

    Never raises for what a server sends: one total deadline (the latency bound) covers connect to
    last byte, the body is capped at MAX_PROBE_BYTES, and an answer of the wrong JSON shape or
    type is a failed probe naming what was wrong (the bench client's request() and its deadline).
    """
    from ..bench.client import Endpoint, ResponseTooLarge, request
    from ..bench.probes import answer_matches

    body = {"model": model, "messages": [{"role": "user", "content": s.prompt}],
            "temperature": 0, "max_tokens": s.max_tokens, "stream": False}  # fmt: skip
    t0 = time.monotonic()
    endpoint = None
    try:
        endpoint = Endpoint(url, model, api_key, s.latency_s)
        status, raw = request(endpoint, "POST", "/chat/completions", body, cap=MAX_PROBE_BYTES)
    except TimeoutError:
        took = time.monotonic() - t0
        return ProbeResult(False, took, None, "no answer within the latency bound (TimeoutError)")
    except ResponseTooLarge:
        return ProbeResult(False, time.monotonic() - t0, None,
                           f"answer larger than {MAX_PROBE_BYTES >> 20} MiB (stopped reading)")  # fmt: skip
    except (OSError, http.client.HTTPException, SparkfleetError) as exc:
        what = endpoint.secrets.safe(str(exc)) if endpoint else str(exc)
        return ProbeResult(False, time.monotonic() - t0, None, f"{what} ({type(exc).__name__})")
    took = time.monotonic() - t0
    if status != 200:
        return ProbeResult(False, took, None, f"HTTP {status}")
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        kind = "nested too deeply" if isinstance(exc, RecursionError) else "not JSON"
        return ProbeResult(False, took, None, f"malformed completion: {kind}")
    answer, problem = completion_text(doc)
    if answer is None:
        return ProbeResult(False, took, None, f"malformed completion: {problem}")
    answer = endpoint.secrets.safe(answer)
    if took > s.latency_s:
        return ProbeResult(False, took, answer, f"answered in {took:.1f} s, bound {s.latency_s:g} s")
    if not answer_matches(answer, s.expect):
        return ProbeResult(
            False, took, answer, f"wrong answer {answer.strip()[:60]!r}, expected {s.expect!r}"
        )
    return ProbeResult(True, took, answer)


def completion_text(doc: Any) -> tuple[str | None, str]:
    """choices[0].message.content of a chat completion, or (None, what is of the wrong type)."""
    choices = doc.get("choices") if isinstance(doc, dict) else None
    if not isinstance(choices, list) or not choices:
        return None, "no choices list"
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        return None, "choices[0].message is not an object"
    content = message.get("content")
    if content is None:
        return "", ""
    if not isinstance(content, str):
        return None, f"content is a JSON {type(content).__name__}, not text"
    return content, ""


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
    interrupted: bool = False  # Ctrl-C ended the watch (its normal end at a terminal)


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
        on_state: Callable[[str, WatchOutcome, ProbeResult | None], None] = lambda *_a: None,
    ) -> None:
        """`hold()` names a reason a restart must not be tried (the memory watchdog fired), else None.
        `on_state(state, outcome, probe)` hears what the loop does after every probe (one of
        ops/watchstate.py's STATES), for whoever shows the lane live (the state file, a
        terminal's heartbeat)."""
        self.hold = hold
        self.on_state = on_state
        self.lane, self.s = lane, settings
        self.probe, self.collect, self.restart, self.stop = probe, collect, restart, stop
        self.clock, self.sleep, self.on_event = clock, sleep, on_event
        self.restarts: deque[float] = deque()

    def _guard(self, what: str, fn: Callable[[], Any], fallback: Any) -> Any:
        """fn(), or `fallback` when it raised: whatever a lane, a host or a file does to one step,
        the loop keeps watching (a supervisor that dies leaves a wrong lane with nobody watching).
        The exception is reported as an event, with the line it came from."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - deliberately everything: see the docstring
            if getattr(exc, "exit_code", None) == ExitCode.INTERRUPTED:  # Ctrl-C inside a relaunch
                raise KeyboardInterrupt from exc
            self.on_event(f"{self.lane}: {what} raised {crash_text(exc)}")
            return fallback(exc) if callable(fallback) else fallback

    def _tell(self, state: str, out: WatchOutcome, res: ProbeResult) -> None:
        self._guard("telling the state", lambda: self.on_state(state, out, res), None)

    def budget_left(self, now: float) -> int:
        while self.restarts and now - self.restarts[0] > self.s.window_s:
            self.restarts.popleft()
        return self.s.max_restarts - len(self.restarts)

    def run(self, max_probes: int | None = None) -> WatchOutcome:
        """Probe until `max_probes` ran, a human is needed, or Ctrl-C (then: what was seen so far)."""
        out = WatchOutcome(self.lane, 0, 0)
        try:
            return self._loop(out, max_probes)
        except KeyboardInterrupt:
            out.interrupted = True
            return out

    def _loop(self, out: WatchOutcome, max_probes: int | None) -> WatchOutcome:
        last_ok_end: float | None = None
        while max_probes is None or out.probes < max_probes:
            start = self.clock()
            res = self._guard("the probe", self.probe,
                              lambda exc, t0=start: ProbeResult(False, self.clock() - t0, None,
                                                      f"the probe raised {crash_text(exc)}"))  # fmt: skip
            out.probes += 1
            self._tell("watching" if res.ok else "failing", out, res)
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
            bundle = self._guard("collecting the incident bundle", lambda why=reason: self.collect(why), None)
            held = self._guard("the memory watchdog check", self.hold, None)
            if held or self.budget_left(seen) <= 0:
                self._guard("stopping the lane", self.stop, None)
                out.incidents.append(Incident(time.time(), reason, bundle, False))
                out.needs_human = True
                why = held or (
                    f"{len(self.restarts)} restarts in the last {self.s.window_s:g} s did not keep it healthy"
                )
                out.message = f"{self.lane}: {why}; the lane is stopped and needs a human (bundle: {bundle})"
                self._tell("needs_human", out, res)
                self.on_event(out.message)
                return out
            backoff = self.s.backoff_s * (2 ** len(self.restarts))
            self.on_event(
                f"{self.lane}: restarting in {backoff:g} s ({self.budget_left(seen)} restarts left)"
            )
            self._tell("restarting", out, res)
            self.sleep(backoff)
            self.restarts.append(self.clock())
            ok = bool(self._guard("the restart", self.restart, False))
            out.restarts += 1
            out.incidents.append(Incident(time.time(), reason, bundle, True, ok))
            last_ok_end = None
            self.on_event(f"{self.lane}: restart {'came up' if ok else 'FAILED'}")
        return out


def crash_text(exc: BaseException) -> str:
    """`TypeError: ... (at supervisor.py:123)`: what an event or an incident says about an exception."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {str(exc)[:300]}{where}"


def incident_dir(root: Path, lane: str, t: float | None = None) -> Path:
    t = time.time() if t is None else t
    return root / RECIPES_DIR / lane / "incidents" / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(t))


BUNDLE_DIR_MODE, BUNDLE_FILE_MODE = 0o700, 0o600  # a bundle holds logs and envs: its owner's alone


def write_bundle(
    root: Path, lane: str, reason: str, per_host: dict[str, dict], extra: dict, secrets: Iterable[str] = ()
) -> Path:
    """recipes/<lane>/incidents/<UTC>/: summary.json + per host and rank the pieces as plain files.

    Every value in `secrets` is cut out of every file (the node already scrubbed what it knew;
    this is what the operator knows: the recipe's env, the lane's API key). Directories 0700,
    files 0600, and incidents/ carries a `.gitignore` of `*`: a bundle never lands in the fleet
    checkout's history, wherever that checkout is.
    """
    scrub = Secrets(tuple(sorted({v for v in secrets if v}, key=len, reverse=True)))
    per_host = scrub.safe_all(per_host)
    reason = scrub.safe(reason)
    top = incident_dir(root, lane).parent
    ensure_dir(top, BUNDLE_DIR_MODE)
    os.chmod(top, BUNDLE_DIR_MODE)  # ensure_dir keeps an existing folder's mode, which may be 0755
    write_bytes(top / ".gitignore", b"# incident bundles hold logs and envs: never commit them\n*\n")
    d = incident_dir(root, lane)
    n = 1
    while True:
        try:
            os.mkdir(d, BUNDLE_DIR_MODE)
            break
        except FileExistsError:
            d = d.with_name(d.name.split("-")[0] + f"-{n}")
            n += 1
    os.chmod(d, BUNDLE_DIR_MODE)

    def put(name: str, text: str) -> None:
        write_bytes(d / name, text.encode(), mode=BUNDLE_FILE_MODE)

    summary = {"lane": lane, "reason": reason, "at": time.time(), "hosts": sorted(per_host), **extra}
    for host, b in per_host.items():
        if "error" in b:
            put(f"{host}.error.txt", str(b["error"]))
            continue
        put(f"{host}.dmesg.txt", str(b.get("dmesg", "")))
        put(f"{host}.nvidia-smi-q.txt", str(b.get("nvidia_smi_q", "")))
        put(f"{host}.meminfo.txt", str(b.get("meminfo", "")))
        for r in b.get("ranks", []):
            stem = f"{host}.rank{r['rank']}"
            put(f"{stem}.log", str(r.get("log_tail", "")))
            meta = {k: r.get(k) for k in ("rank", "running", "returncode", "boot_stage", "record", "env")}
            put(f"{stem}.json", json.dumps(meta, indent=1))
        if b.get("memstop"):
            summary.setdefault("memstop", {})[host] = b["memstop"]
    put("summary.json", json.dumps(scrub.safe_all(summary), indent=1))
    return d


def lane_secrets(inv, lane_name: str) -> set[str]:
    """The secret values the operator knows for a lane: its ranks' env (recipe [launch.env] and
    what is derived from it) by the rule of spec.secret_values, and the lane's API key."""
    found: set[str] = set()
    try:
        for spec in dry_run(inv, lane_name).by_rank():
            found |= secret_values(spec.env)
    except SparkfleetError:  # a lane that no longer plans: its recipe's own env, as written
        launch = inv.lane(lane_name).sections.launch
        env = launch.env if launch is not None else {}
        found |= secret_values({str(k): str(v) for k, v in env.items()})
    key = for_lane(inv, lane_name).api_key()
    if key:
        found.add(key)
    return found


# ---- wiring to a real lane ----------------------------------------------------------------------


def collect_incident(inv, lane_name: str, reason: str, root: Path | None = None) -> Path:
    """`incident_of` the lane as `inv` has it; its bundles under `root`, else beside its generations."""
    run = lane_run(inv, lane_name, root)
    return incident_of(run, reason)


def incident_of(run: LaneRun, reason: str) -> Path:
    """Ask every host of the lane for its bundle (in parallel) and write them under incidents/, beside
    the lane's generations (a replica's beside its own)."""
    inv, lane_name, lane, recipe, root = run.inv, run.name, run.lane, run.recipe, run.home
    secrets = lane_secrets(inv, lane_name)

    def one(host: str) -> dict:
        req = lane_request(  # the secrets go over ssh stdin, like the launch request's env
            IncidentRequest, inv, lane_name, host, lines=200, signatures=list(recipe.ready_signatures),
            secrets=sorted(secrets),
        )  # fmt: skip
        try:
            return ask_host(inv, host, req, timeout=180)
        except SparkfleetError as exc:
            return {"error": exc.message}

    per_host = dict(zip(lane.hosts, fan_out(one, list(lane.hosts)), strict=True))
    gen = current(root, lane_name)
    skipped = [str(s) for s in scan(root, lane_name)[1]]
    extra = {"generation": gen["id"] if gen else None, "skipped_generations": skipped}
    return write_bundle(root, lane_name, reason, per_host, extra, secrets)


def watch_lane(
    inv,
    lane_name: str,
    settings: WatchSettings,
    max_probes: int | None = None,
    allow_drift: bool = False,
    on_event: Callable[[str], None] = lambda _m: None,
    on_state: Callable[[str, WatchOutcome, ProbeResult | None], None] = lambda *_a: None,
) -> WatchOutcome:
    """Supervise a running lane: the real probe, bundle collection and relaunch."""
    run = lane_run(inv, lane_name)
    target = for_lane(inv, lane_name)
    recipe, home = run.recipe, run.home
    model = recipe.served_model_name or lane_name

    def restart() -> bool:
        try:
            stop_lane(run, recipe.timeouts.stop_s, by="sparkfleet watch (restart)")
            # A generation the operator let through with --allow-nas-weights is restarted the same way.
            nas = bool((current(home, lane_name) or {}).get("nas_weights"))
            rep = launch_lane(run, Gates(allow_drift=allow_drift, allow_nas_weights=nas), on_event=on_event)
            return bool(rep.ready and rep.ready.ok)
        except SparkfleetError as exc:
            on_event(f"{lane_name}: relaunch refused: {exc.message}")
            return False

    tripped: list[str] = []  # [watchdog] scope = "lane" stopped the lane: never restarted (the kit's)

    lane_scope = recipe.watchdog_scope == "lane"

    def probe() -> ProbeResult:
        """The known answer in time, and every rank alive (a head can answer while a worker is gone).

        The generation goes first: a wedge is seen within two intervals only if no ssh round trip
        to every host stands before it. A lane-scoped watchdog (the kit's pair watchdog) is the one
        exception: a trip anywhere stops the lane before anything else is asked."""
        if lane_scope:
            st, lane_stop = status_enforced(run)
            if lane_stop is not None:
                tripped.append(lane_stop.message)
                return ProbeResult(False, 0.0, None, lane_stop.message)
        res = probe_generation(target.url, model, settings, target.api_key())
        if not res.ok:
            return res
        if not lane_scope:
            st = lane_status(run)
        if st.running < st.expected:
            down = [f"rank {r.rank} on {r.host}" for r in st.ranks if not r.running]
            why = "; ".join([*down, *(e["error"] for e in st.errors)])
            return ProbeResult(False, res.latency_s, res.answer,
                               f"{st.running} of {st.expected} ranks running ({why})")  # fmt: skip
        return res

    def hold() -> str | None:
        """A node's memory watchdog stopped ranks: relaunching into memory pressure locks hosts up."""
        errs = status(inv, lane_name).errors_of(ErrorKind.MEMSTOP)
        return "; ".join([*tripped, *(f"{e['host']}: {e['error']}" for e in errs)]) or None

    def tell(state: str, out: WatchOutcome, res: ProbeResult | None) -> None:
        counts = (out.probes, out.failures, out.restarts)
        watchstate.record(home, lane_name, state, counts, res.ok if res else None,
                          res.latency_s if res else None, res.error if res else None)  # fmt: skip
        on_state(state, out, res)

    sup = Supervisor(
        lane_name,
        settings,
        hold=hold,
        on_state=tell,
        probe=probe,
        collect=lambda reason: str(incident_of(run, reason)),
        restart=restart,
        stop=lambda: stop_lane(run, recipe.timeouts.stop_s, by="sparkfleet watch"),
        on_event=on_event,
    )
    return sup.run(max_probes)
