"""Readiness from log signatures + endpoints; timeouts and exits name the last boot stage."""

from __future__ import annotations

from sparkfleet.lane.readiness import BootLog, RankExit, wait_ready

SIGS = ("RoCEnante ready: world=4", "[moe_b12x_next] armed", "The server is fired up and ready to roll!")
WL = r"Load weight end\. .*?elapsed=\s*([0-9.]+)"


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def head_script(chunks, health_from=None, running_until=None, rc=None):
    """poll_head(offset) answering successive chunks of log text."""
    state = {"i": 0}

    def poll(offset):
        i = state["i"]
        state["i"] += 1
        data = chunks[i] if i < len(chunks) else ""
        running = running_until is None or i < running_until
        ans = {
            "found": True,
            "data": data,
            "offset": offset + len(data.encode()),
            "running": running,
            "returncode": None if running else rc,
        }
        if health_from is not None and i >= health_from:
            ans.update(health=200, models_status=200, models=["deepseek-v4.1-flash"])
        else:
            ans.update(health=503, models_status=None)
        return ans

    return poll


def test_bootlog_partial_lines_and_weight_load():
    b = BootLog(SIGS, WL, started=0.0)
    b.feed("[2026] Load weight end. type=X, avail mem=3 GB, elapsed=170.25 s\nRoCEnan", 1.0)
    assert b.seen == {} and b.weight_load_s == 170.25
    b.feed("te ready: world=4 hcas=rocep1s0f0\n", 2.0)
    assert b.seen == {SIGS[0]: 2.0} and b.last_stage == SIGS[0]
    assert b.missing == list(SIGS[1:])


def test_ready_needs_every_signature_and_both_endpoints():
    clock = FakeClock()
    poll = head_script(
        ["Load weight end. elapsed=12.5 s\n", SIGS[0] + "\n", SIGS[1] + "\n" + SIGS[2] + "\n", "", ""],
        health_from=3,
    )
    r = wait_ready(
        "lane", SIGS, WL, "deepseek-v4.1-flash", poll, lambda: [], 60, 1.0, clock=clock, sleep=clock.sleep
    )
    assert r.ok and r.reason == "ready"
    assert r.time_to_ready_s == 3.0 and r.weight_load_s == 12.5
    assert list(r.stages) == list(SIGS) and r.models == ["deepseek-v4.1-flash"] and r.health == 200


def test_endpoints_up_but_signature_missing_is_not_ready():
    clock = FakeClock()
    poll = head_script([SIGS[0] + "\n" + SIGS[2] + "\n"], health_from=0)
    r = wait_ready("lane", SIGS, WL, None, poll, lambda: [], 10, 1.0, clock=clock, sleep=clock.sleep)
    assert not r.ok
    assert "timeout after 10 s" in r.reason and "last boot stage 'The server is fired up" in r.reason
    assert r.missing == [SIGS[1]] and "[moe_b12x_next] armed" in r.reason


def test_head_exit_names_stage_and_keeps_tail():
    clock = FakeClock()
    poll = head_script([SIGS[0] + "\nTraceback: ValueError multiples of 128\n"], running_until=1, rc=1)
    r = wait_ready(
        "lane", SIGS, WL, None, poll, lambda: [], 10, 1.0, clock=clock, sleep=clock.sleep, head_host="dgx1"
    )
    assert not r.ok and r.failed == RankExit("dgx1", 0, 1)
    assert r.reason == "rank 0 exited with code 1 (last boot stage: RoCEnante ready: world=4)"
    assert r.tail[-1] == "Traceback: ValueError multiples of 128"


def test_worker_exit_detected():
    clock = FakeClock()
    poll = head_script(["booting\n"] * 10)
    calls = []

    def exited():
        calls.append(1)
        return [RankExit("dgx3", 2, 137)] if len(calls) >= 2 else []

    r = wait_ready(
        "lane", SIGS, WL, None, poll, exited, 100, 1.0, worker_every=2, clock=clock, sleep=clock.sleep
    )
    assert not r.ok and r.failed == RankExit("dgx3", 2, 137)
    assert r.reason.startswith("rank 2 on dgx3 exited with code 137 (last boot stage: none)")


def test_a_worker_that_died_before_the_head_went_ready_is_not_ready():
    """Found by a parallel `make test` (test_launch_fleet's worker-dies lane reported ready): workers
    were asked only every `worker_every` polls, so a head ready on the next poll hid a dead rank."""
    clock = FakeClock()
    poll = head_script(["\n".join(SIGS) + "\n"], health_from=0)
    r = wait_ready(
        "lane", SIGS, WL, None, poll, lambda: [RankExit("dgx3", 2, 1)], 60, 1.0, worker_every=3,
        clock=clock, sleep=clock.sleep,
    )  # fmt: skip
    assert not r.ok and r.failed == RankExit("dgx3", 2, 1)
    assert r.reason.startswith("rank 2 on dgx3 exited with code 1 (last boot stage: The server is fired up")


def test_timeout_holds_while_the_log_grows_faster_than_one_read_per_poll():
    """Issue 10.8: `launch --timeout 10` never timed out while a rank's log grew >256 KiB per poll."""
    clock = FakeClock()
    flood = "W warning: something noisy\n" * 12_000  # > 256 KiB every read: the catch-up path

    def poll(offset):
        clock.t += 0.5  # each read takes time
        return {"found": True, "data": flood, "offset": offset + len(flood), "running": True, "health": 503}

    rep = wait_ready(
        "lane", SIGS, WL, None, poll, lambda: [], timeout_s=10, poll_s=1, clock=clock, sleep=clock.sleep
    )
    assert not rep.ok and rep.reason.startswith("timeout after 10 s")
    assert clock.t - 100.0 < 12


def test_rank_logs_are_capped_and_rotated(tmp_path):
    """Issue 10.8: a rank printing without end filled 543 MiB per rank; the log is capped and rotated."""
    import json
    import subprocess
    import sys

    log, exit_file = tmp_path / "rank0.log", tmp_path / "rank0.exit"
    writer = "import sys\nfor i in range(40000): sys.stdout.write(f'line {i:08d} ' + 'x' * 64 + '\\n')\n"
    cp = subprocess.run(
        [sys.executable, "-m", "sparkfleet.node.rank_parent", "--exit-file", str(exit_file),
         "--log", str(log), "--max-log-bytes", str(512 * 1024), "--", sys.executable, "-c", writer],
        capture_output=True, timeout=120,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    assert json.loads(exit_file.read_text())["returncode"] == 0
    old = log.with_name("rank0.log.1")
    assert log.stat().st_size <= 512 * 1024 and old.stat().st_size <= 512 * 1024
    assert log.read_text().splitlines()[-1].startswith("line 00039999 ")  # the newest lines are kept
