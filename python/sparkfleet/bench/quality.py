"""Quality: run tool-eval-bench (pinned) against a lane and keep its score and failed scenarios.

Why a subprocess: tool-eval-bench is a CLI with its own event loop, SQLite history (./data/) and
report folder (./runs/). We run it in a scratch working directory, ask for its JSON envelope with
`--json-file`, and parse that. The API key travels in the environment (TOOL_EVAL_API_KEY), never on
the command line (visible in ps) and never in our report. The user's numbers read like
"169/184 (92/100)": points / max points, then the 0–100 score; we keep both.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from ..base.selfexec import module_argv
from .relay import CountingRelay

TOOL = "tool-eval-bench"
TICK_S = 1.0  # how often on_event hears the traffic a scenario has streamed so far
PINNED_VERSION = "3.0.0"  # keep in step with pyproject.toml
DEADLINE_MODULE = "sparkfleet.bench.quality_deadline"
TIMEOUT_KIND = "timeout"  # tool-eval-bench's failure_kind for a request past its deadline


@dataclass(frozen=True)
class QualitySettings:
    short: bool = True  # the core 15 scenarios; False runs the full pool
    scenarios: tuple[str, ...] = ()  # explicit scenario ids (e.g. TC-01), overriding `short`
    timeout_s: float = 3600.0
    request_timeout_s: float = 120.0


@dataclass(frozen=True)
class FailedScenario:
    scenario_id: str
    status: str  # "fail" | "partial" | ...
    points: float | None
    summary: str | None
    # tool-eval-bench's why: "timeout" (a request past quality.request_timeout_s; the scenario is
    # then left out of the score), "missing_step", "wrong_tool", ...
    failure_kind: str | None = None


@dataclass
class QualityResult:
    """What the quality run said; `status` is ok | failed | unavailable (score only when ok)."""

    status: str
    tool_version: str | None
    argv: list[str] = field(default_factory=list)
    score: float | None = None  # 0–100
    points: float | None = None
    max_points: float | None = None
    rating: str | None = None
    scenarios: int | None = None
    failed_scenarios: list[FailedScenario] = field(default_factory=list)
    safety_warnings: list[str] = field(default_factory=list)
    duration_s: float | None = None
    error: str | None = None


def installed_version() -> str | None:
    try:
        return metadata.version(TOOL)
    except metadata.PackageNotFoundError:
        return None


def build_argv(
    base_url: str,
    model: str,
    json_file: Path,
    output_dir: Path,
    settings: QualitySettings,
    python: str | None = None,
) -> list[str]:
    """The exact command line; no secret is ever part of it. Without `python`: this interpreter
    with this process's search path (sparkfleet.base.selfexec), where tool-eval-bench is installed."""
    args = [
        "run",
        "--base-url",
        base_url,
        "--model",
        model,
        "--json-file",
        str(json_file),
        "--output-dir",
        str(output_dir),
        "--no-live",
        "--timeout",
        f"{settings.request_timeout_s:g}",
    ]
    # each whole request under the deadline (quality_deadline.py): tool-eval-bench's own --timeout
    # bounds only the silence between streamed bytes
    wrapped = [DEADLINE_MODULE, f"{settings.request_timeout_s:g}", *args]
    argv = [python, "-m", *wrapped] if python else module_argv(*wrapped)
    if settings.scenarios:
        argv += ["--scenarios", *settings.scenarios]
    elif settings.short:
        argv.append("--short")
    return argv


def parse_envelope(doc: dict[str, Any], tool_version: str | None, argv: list[str]) -> QualityResult:
    """tool-eval-bench's --json-file envelope → QualityResult (an error envelope → status failed).

    An envelope of another shape (a tool version that changed it, a truncated file) is a failed
    result naming what was wrong, never an exception: it would end the whole bench run.
    """
    problem = envelope_problem(doc)
    if problem:
        why = f"the result is not tool-eval-bench's: {problem}"
        return QualityResult("failed", tool_version, argv, error=why)
    if "error" in doc and "scores" not in doc:
        return QualityResult("failed", tool_version, argv, error=str(doc["error"]))
    scores = doc.get("scores") or {}
    failed = [
        FailedScenario(
            str(r.get("scenario_id")), str(r.get("status")), r.get("points"), r.get("summary"),
            str(r["failure_kind"]) if r.get("failure_kind") else None,
        )  # fmt: skip
        for r in scores.get("scenario_results") or []
        if r.get("status") != "pass"
    ]
    score = doc.get("final_score", scores.get("final_score"))
    if score is None:
        return QualityResult("failed", tool_version, argv, error="the envelope holds no final_score")
    ran = scores.get("scenario_results") or []
    late = [f for f in failed if f.failure_kind == TIMEOUT_KIND]
    if ran and len(late) == len(ran):  # all left out of the score: its 0 would be no measurement
        return QualityResult(
            "failed", tool_version, argv, scenarios=len(ran), failed_scenarios=failed,
            error=f"every scenario ({len(ran)}) ran past the request deadline: no score",
        )  # fmt: skip
    return QualityResult(
        status="ok" if doc.get("status", "completed") == "completed" else "failed",
        tool_version=doc.get("tool_eval_bench_version") or tool_version,
        argv=argv,
        score=float(score),
        points=scores.get("total_points"),
        max_points=scores.get("max_points"),
        rating=doc.get("rating") or scores.get("rating"),
        scenarios=doc.get("total_scenarios"),
        failed_scenarios=failed,
        safety_warnings=[str(w) for w in doc.get("safety_warnings") or []],
        error=None if doc.get("status", "completed") == "completed" else f"run status {doc.get('status')!r}",
    )


def envelope_problem(doc: Any) -> str | None:
    """What makes `doc` not an envelope parse_envelope can read, or None."""
    if not isinstance(doc, dict):
        return f"a JSON {type(doc).__name__}, not an object"
    scores = doc.get("scores") or {}
    if not isinstance(scores, dict):
        return "scores is not an object"
    results = scores.get("scenario_results") or []
    if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
        return "scores.scenario_results is not a list of objects"
    score = doc.get("final_score", scores.get("final_score"))
    if score is not None and (isinstance(score, bool) or not isinstance(score, int | float)):
        return f"final_score {str(score)[:40]!r} is not a number"
    if not isinstance(doc.get("safety_warnings") or [], list):
        return "safety_warnings is not a list"
    return None


def run_quality(
    base_url: str,
    model: str,
    settings: QualitySettings,
    api_key: str | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> QualityResult:
    """Run tool-eval-bench in a scratch directory and parse its result. Never invents a score.

    `on_event` hears tool-eval-bench's own JSON-lines events (scenario_start, scenario_result), and
    every TICK_S a `{"event": "traffic", "bytes": B, "frames": F, "elapsed_s": T}` of what the lane
    has streamed back so far (through a counting relay on plain http; bytes/frames are absent where
    the URL is https). The result's argv names the lane's URL, the one the relay stands in for."""
    version = installed_version()
    if version is None:
        return QualityResult(
            "unavailable", None, error=f"{TOOL} is not installed (pip install {TOOL}=={PINNED_VERSION})"
        )
    if version != PINNED_VERSION:
        return QualityResult(
            "unavailable",
            version,
            error=f"{TOOL} {version} is installed but sparkfleet pins {PINNED_VERSION}",
        )
    relay = CountingRelay.for_url(base_url) if on_event else None
    with (
        tempfile.TemporaryDirectory(prefix="sparkfleet-quality-") as scratch,
        relay or contextlib.nullcontext(),
    ):
        work = Path(scratch)
        json_file = work / "result.json"
        argv = build_argv(base_url, model, json_file, work / "runs", settings)
        run_argv = argv
        if relay is not None:
            run_argv = build_argv(relay.url(base_url), model, json_file, work / "runs", settings)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOL_EVAL_")}
        if api_key:
            env["TOOL_EVAL_API_KEY"] = api_key
        started = time.monotonic()
        proc = subprocess.Popen(
            run_argv,
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        timed_out = threading.Event()

        def kill_on_timeout() -> None:
            timed_out.set()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # our own child's process group, by its id

        watchdog = threading.Timer(settings.timeout_s, kill_on_timeout)
        watchdog.start()
        tail: list[str] = []
        said = threading.Lock()  # the ticker and the event reader take turns at on_event
        done = threading.Event()

        def tick() -> None:
            while not done.wait(TICK_S):
                event: dict[str, Any] = {"event": "traffic", "elapsed_s": time.monotonic() - started}
                if relay is not None:
                    t = relay.traffic()
                    event.update(bytes=t.bytes, frames=t.frames)
                with said:
                    on_event(event)  # type: ignore[misc]

        if on_event:
            threading.Thread(target=tick, daemon=True).start()
        try:
            assert proc.stderr is not None
            for line in proc.stderr:  # JSON-lines progress events
                tail = (tail + [line.rstrip()])[-20:]
                if on_event and line.startswith("{"):
                    with contextlib.suppress(ValueError), said:
                        on_event(json.loads(line))
            code = proc.wait()
        finally:
            done.set()
            watchdog.cancel()
            if proc.poll() is None:
                kill_on_timeout()
                proc.wait()
        if timed_out.is_set():
            return QualityResult(
                "failed",
                version,
                argv,
                duration_s=time.monotonic() - started,
                error=f"{TOOL} did not finish within {settings.timeout_s:g} s",
            )
        duration = time.monotonic() - started
        if not json_file.is_file():
            detail = next((t for t in reversed(tail) if t), "no output")
            return QualityResult(
                "failed",
                version,
                argv,
                duration_s=duration,
                error=f"{TOOL} exited {code} without a result: {detail[:300]}",
            )
        try:
            doc = json.loads(json_file.read_text())
        except ValueError as exc:
            return QualityResult(
                "failed", version, argv, duration_s=duration, error=f"unreadable result: {exc}"
            )
    result = parse_envelope(doc, version, argv)
    result.duration_s = duration
    if code not in (0, 2) and result.status == "ok":  # 2 = safety gate, still a scored run
        result.status, result.error = "failed", f"{TOOL} exited {code}"
    return result
