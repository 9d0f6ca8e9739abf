"""Is the lane up? The head's boot signatures, then /health and /v1/models.

Readiness reads logs and probes; it decides no env. A TP4 lane that "comes up" without its
signature lines is running the wrong code (night shift: DSV41_LAUNCHER unset silently turned
every TP4 adapter off), so every signature the recipe names must appear, not only SGLang's
ready line. On a timeout or a rank that exits, the report names the last boot stage reached and
carries the log tail, because "it did not come up" is not something anyone can act on.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ..facts.apikeys import KEYLESS_PROBE, REFUSED

TAIL_LINES = 40
# Weight-load progress as SGLang/vLLM print it ("Loading safetensors checkpoint shards:  45% Completed
# | 10/22 [...]"): the lane may sit in this stage for many minutes, so it is shown as it moves.
LOAD_PROGRESS = re.compile(r"(\d+)% Completed \| (\d+)/(\d+)")


@dataclass
class BootLog:
    """Feeds on log text as it arrives; remembers when each signature first appeared."""

    signatures: tuple[str, ...]
    weight_load_regex: str = ""
    started: float = 0.0
    seen: dict[str, float] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    weight_load_s: float | None = None
    tail: deque = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    load_progress: str | None = None  # "10/22 (45%)" while weights load, from the log's own counter
    _partial: str = ""

    def feed(self, text: str, now: float) -> None:
        text = self._partial + text
        lines = text.split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._line(line.rstrip("\r"), now)

    def flush(self, now: float) -> None:
        if self._partial:
            self._line(self._partial, now)
            self._partial = ""

    def _line(self, line: str, now: float) -> None:
        self.tail.append(line)
        for sig in self.signatures:
            if sig not in self.seen and sig in line:
                self.seen[sig] = round(now - self.started, 3)
                self.order.append(sig)
        progress = LOAD_PROGRESS.search(line)
        if progress:
            self.load_progress = f"{progress.group(2)}/{progress.group(3)} ({progress.group(1)}%)"
        if self.weight_load_regex and self.weight_load_s is None:
            m = re.search(self.weight_load_regex, line)
            if m:
                self.weight_load_s = float(m.group(1))

    @property
    def all_seen(self) -> bool:
        return all(s in self.seen for s in self.signatures)

    @property
    def last_stage(self) -> str | None:
        return self.order[-1] if self.order else None

    @property
    def missing(self) -> list[str]:
        return [s for s in self.signatures if s not in self.seen]


@dataclass(frozen=True)
class RankProgress:
    """What one rank's log shows so far, for a live view of a long boot."""

    host: str
    rank: int
    stage: str | None  # the last of the recipe's ready_signatures seen in this rank's log
    stages_seen: int
    stages_total: int
    elapsed_s: float
    load_progress: str | None
    last_line: str
    running: bool = True


class BootWatch:
    """Every rank's BootLog during a launch: fed from the agents' `watch` answers, read as snapshots."""

    def __init__(self, ranks: list[tuple[str, int]], signatures: tuple[str, ...], started: float) -> None:
        self.started = started
        self.logs = {rank: BootLog(signatures, started=started) for _, rank in ranks}
        self.hosts = dict((rank, host) for host, rank in ranks)
        self.offsets = {rank: 0 for _, rank in ranks}
        self.running = {rank: True for _, rank in ranks}

    def feed(self, rank: int, answer: dict, now: float) -> None:
        self.logs[rank].feed(answer.get("data", ""), now)
        self.offsets[rank] = answer.get("offset", self.offsets[rank])
        self.running[rank] = bool(answer.get("running", True))

    def snapshot(self, now: float) -> list[RankProgress]:
        out = []
        for rank, log in sorted(self.logs.items()):
            last = next((ln for ln in reversed(log.tail) if ln.strip()), log._partial.strip())
            out.append(
                RankProgress(
                    host=self.hosts[rank],
                    rank=rank,
                    stage=log.last_stage,
                    stages_seen=len(log.seen),
                    stages_total=len(log.signatures),
                    elapsed_s=round(now - self.started, 1),
                    load_progress=log.load_progress,
                    last_line=last,
                    running=self.running[rank],
                )
            )
        return out


@dataclass(frozen=True)
class RankExit:
    host: str
    rank: int
    returncode: int | None


@dataclass
class ReadyReport:
    """The answer of one readiness wait."""

    lane: str
    ok: bool
    reason: str
    time_to_ready_s: float | None
    weight_load_s: float | None
    stages: dict[str, float]  # signature -> seconds after launch
    last_stage: str | None
    missing: list[str]
    health: int | None = None
    models: list[str] = field(default_factory=list)
    failed: RankExit | None = None
    tail: list[str] = field(default_factory=list)


HeadPoll = Callable[[int], dict]  # offset -> agent `watch` answer for the head
RankPoll = Callable[[], list[RankExit]]  # ranks that are no longer running


def wait_ready(
    lane: str,
    signatures: tuple[str, ...],
    weight_load_regex: str,
    served_model_name: str | None,
    poll_head: HeadPoll,
    exited_ranks: RankPoll,
    timeout_s: float,
    poll_s: float = 1.0,
    worker_every: int = 3,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    head_host: str = "head",
) -> ReadyReport:
    """Poll until every signature appeared and both endpoints answer 200, a rank exits, or timeout."""
    start = clock()
    boot = BootLog(signatures, weight_load_regex, started=start)
    offset, health, models, n = 0, None, [], 0

    def report(ok: bool, reason: str, failed: RankExit | None = None) -> ReadyReport:
        boot.flush(clock())
        return ReadyReport(
            lane=lane,
            ok=ok,
            reason=reason,
            time_to_ready_s=round(clock() - start, 3) if ok else None,
            weight_load_s=boot.weight_load_s,
            stages=dict(boot.seen),
            last_stage=boot.last_stage,
            missing=boot.missing,
            health=health,
            models=models,
            failed=failed,
            tail=list(boot.tail),
        )

    def timed_out() -> ReadyReport:
        stage = boot.last_stage or "none (no signature seen)"
        waiting = ", ".join(repr(s) for s in boot.missing) or f"/health={health}, /v1/models"
        return report(
            False, f"timeout after {timeout_s:g} s: last boot stage {stage!r}; still waiting for {waiting}"
        )

    while True:
        ans = poll_head(offset)
        now = clock()
        if not ans.get("found", True):
            return report(False, "the head has no launch record (was it stopped?)")
        boot.feed(ans.get("data", ""), now)
        offset = ans.get("offset", offset)
        if now - start >= timeout_s:
            # checked on every iteration: a rank whose log grows faster than one read per poll
            # (543 MiB per rank once) must not keep the catch-up loop below from ever timing out
            return timed_out()
        if ans.get("data") and len(ans["data"].encode()) >= 256 * 1024:
            continue  # more log waiting: read it before judging
        health = ans.get("health", health)
        models = ans.get("models", models) or []
        if not ans.get("running", True):
            failed = RankExit(head_host, 0, ans.get("returncode"))
            stage = boot.last_stage or "none"
            return report(
                False, f"rank 0 exited with code {failed.returncode} (last boot stage: {stage})", failed
            )
        model_ok = ans.get("models_status") == 200 and (
            served_model_name is None or served_model_name in models
        )
        # Workers are asked every `worker_every` polls, and once more before "ready": a rank that
        # died since the last ask (a slow, loaded fleet polls rarely) must not make a lane ready.
        ready = boot.all_seen and health == 200 and model_ok
        keyless = ans.get("keyless_status")
        if ready and keyless is not None and keyless not in REFUSED:  # up, but serving without its key
            return report(False, f"{head_host} answers POST {KEYLESS_PROBE} without the lane's key (HTTP "
                                 f"{keyless}): vLLM's key guards only /v1 paths; its command needs "
                                 '"--middleware", "{vllm_key_guard}" (docs/serving.md)')  # fmt: skip
        n += 1
        if ready or n % worker_every == 0:
            gone = exited_ranks()
            if gone:
                g = gone[0]
                stage = boot.last_stage or "none"
                return report(
                    False,
                    f"rank {g.rank} on {g.host} exited with code {g.returncode} (last boot stage: {stage})",
                    g,
                )
        if ready:
            return report(True, "ready")
        if now - start >= timeout_s:
            return timed_out()
        sleep(poll_s)
