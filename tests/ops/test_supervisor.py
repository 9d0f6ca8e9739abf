"""The watch loop's restart budget and backoff, on a simulated clock (the real lane: test_gates_fleet)."""

from __future__ import annotations

import pytest

from sparkfleet.base.errors import SparkfleetError
from sparkfleet.fleet.sections import recipe_sections
from sparkfleet.launch.preflight import judge_canary
from sparkfleet.ops.supervisor import ProbeResult, Supervisor, WatchSettings, watch_settings


class Clock:
    def __init__(self) -> None:
        self.t = 0.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.t += s


def test_budget_backoff_and_human():
    clock = Clock()
    s = WatchSettings(interval_s=10, latency_s=5, max_restarts=2, window_s=600, backoff_s=3)
    script = iter([True, False, True, False, True, False])
    events: list[str] = []
    calls = {"collect": 0, "restart": 0, "stop": 0}

    def probe():
        ok = next(script)
        clock.t += 0.5 if ok else s.latency_s  # a hung probe uses its whole latency bound
        return ProbeResult(ok, 0.5 if ok else s.latency_s, error=None if ok else "no answer")

    def count(name, value=None):
        def f(*_):
            calls[name] += 1
            return value if value is not None else f"bundle{calls[name]}"

        return f

    sup = Supervisor("lane", s, probe, count("collect"), count("restart", True), count("stop", 0),
                     clock=clock.now, sleep=clock.sleep, on_event=events.append)  # fmt: skip
    out = sup.run(max_probes=20)
    assert out.needs_human and calls == {"collect": 3, "restart": 2, "stop": 1}
    assert [i.restarted for i in out.incidents] == [True, True, False]
    assert [b for b in clock.sleeps if b in (3, 6)] == [3, 6]  # backoff doubles
    assert all(d <= 2 * s.interval_s for d in out.detect_s)  # the goal: within two probe intervals
    assert "needs a human" in out.message and "bundle3" in out.message


def test_window_forgets_old_restarts():
    clock = Clock()
    s = WatchSettings(interval_s=10, latency_s=5, max_restarts=1, window_s=100, backoff_s=1)
    fails = iter([False, *[True] * 30, False, True])

    def probe():
        ok = next(fails)
        clock.t += 1
        return ProbeResult(ok, 1)

    sup = Supervisor("lane", s, probe, lambda r: None, lambda: True, lambda: None,
                     clock=clock.now, sleep=clock.sleep)  # fmt: skip
    out = sup.run(max_probes=33)
    assert out.restarts == 2 and not out.needs_human  # 300 s apart: each within a fresh window


def test_settings_from_recipe_and_bound():
    raw = {"smoke": {"max_tokens": 64, "cases": [{"prompt": "What is 2+2?", "expect": "4"}]},
           "watch": {"interval_s": 5, "latency_s": 4}}  # fmt: skip
    s = watch_settings(recipe_sections(raw), max_restarts=7, window_s=None)
    assert (s.prompt, s.expect, s.max_tokens, s.interval_s, s.max_restarts) == ("What is 2+2?", "4", 64, 5, 7)
    with pytest.raises(SparkfleetError, match="longer than the interval"):
        watch_settings(recipe_sections(raw), latency_s=9)


def _pair(src, dst, ok=True, gbps=10.0, error=None):
    return {"src": src, "dst": dst, "src_ip": f"10.0.0.{src + 1}", "src_ifname": f"veth{src}",
            "dst_ip": f"10.0.0.{dst + 1}", "dst_port": 4000 + dst, "dst_ifname": f"veth{dst}", "ok": ok,
            "gbps": gbps, "error": error}  # fmt: skip


def test_canary_judgement_names_pair_interface_and_floor():
    hosts = {0: "dgx1", 1: "dgx2", 2: "dgx3"}
    pairs = [_pair(a, b) for a in range(3) for b in range(3) if a != b]
    ok = [{"rank": r, "ok": True, "busbw_gbps": 8.0, "pairs": pairs if r == 0 else []} for r in range(3)]
    assert judge_canary(ok, hosts, "gloo", 5.0).ok
    slow = [dict(p, gbps=0.4) if (p["src"], p["dst"]) == (2, 1) else p for p in pairs]
    rep = judge_canary([dict(ok[0], pairs=slow), *ok[1:]], hosts, "gloo", 20.0)
    assert rep.problems == [
        "all-reduce bus bandwidth 8.00 Gbit/s is under the floor 20 Gbit/s; slowest pair rank 2 (dgx3, "
        "10.0.0.3 on veth2) -> rank 1 (dgx2, 10.0.0.2 on veth1) at 0.40 Gbit/s"
    ]
    broken = [dict(p, ok=False, error="TimeoutError: timed out") if p["src"] == 1 and p["dst"] == 2 else p
              for p in pairs]  # fmt: skip
    bad = [{"rank": r, "ok": False, "stage": "pairs", "pairs": broken if r == 0 else []} for r in range(3)]
    (p,) = judge_canary(bad, hosts, "gloo", 0).problems
    assert p == ("rank 1 (dgx2, 10.0.0.2 on veth1) cannot reach rank 2 (dgx3, 10.0.0.3 on veth2) port 4002: "
                 "TimeoutError: timed out")  # fmt: skip


def test_boot_regression_compares_like_with_like():
    from sparkfleet.launch.generations import boot_record

    warm = {"dgx1": {"warm": True}, "dgx2": {"warm": True}}
    cold = {"dgx1": {"warm": False}, "dgx2": {"warm": True}}
    hist = [
        {"boot": boot_record("k", cold, 300.0, None, [], 25)},
        {"boot": boot_record("k", warm, 60.0, None, [], 25)},
    ]
    assert hist[0]["boot"]["cache"] == "cold" and hist[1]["boot"]["cache"] == "warm"
    assert boot_record("k", warm, 70.0, None, hist, 25)["regression"] is None  # +17%: within the limit
    slow = boot_record("k", warm, 90.0, None, hist, 25)
    assert slow["regression"] == "warm boot took 90.0 s, +50% against the last warm boot (60.0 s; limit +25%)"
    assert boot_record("k", cold, 310.0, None, hist, 25)["regression"] is None  # a cold boot vs cold boots
    assert (
        boot_record("other", warm, 900.0, None, hist, 25)["regression"] is None
    )  # another image/model/shape


def test_memory_watchdog_verdict_is_not_restarted():
    clock = Clock()
    s = WatchSettings(interval_s=10, latency_s=5, max_restarts=5, backoff_s=1)
    restarts = []
    verdict = "dgx2: memory watchdog: MemAvailable 0.4 GiB fell under the floor 0.5 GiB"
    sup = Supervisor("lane", s, lambda: ProbeResult(False, 1, error="connection refused"), lambda r: "b1",
                     lambda: restarts.append(1) or True, lambda: None, clock=clock.now, sleep=clock.sleep,
                     hold=lambda: verdict)  # fmt: skip
    out = sup.run(max_probes=5)
    assert out.needs_human and not restarts and out.probes == 1
    assert out.message.startswith("lane: dgx2: memory watchdog: MemAvailable 0.4 GiB")
