"""`report compare` refuses (or, forced, marks) reports that measured different things."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from sparkfleet.base.errors import ExitCode
from sparkfleet.bench.report import compare, render_markdown, write_report
from sparkfleet.bench.target import Thresholds

pytestmark = pytest.mark.slow

FP = {
    "host": "dgx1",
    "kernel": "6.11.0-1016-nvidia",
    "driver": "580.95.05",
    "cuda": "13.0",
    "nccl": "2.27.7",
    "firmware": "1.2.3",
    "gpu_clocks": "3003 MHz",
    "power_mode": "max",
    "mem_available_bytes": 110_000_000_000,
    "image_id": "sha256:" + "c" * 64,
}


def _doc(
    prompt_tokens: int = 487, ttft: float = 0.1, decode: float = 35.0, created: str = "09:00:00"
) -> dict:
    return {
        "schema": "sparkfleet.bench/1",
        "status": "ok",
        "failures": [],
        "tag": "t",
        "created_utc": f"2026-09-27T{created}Z",
        "url": "http://127.0.0.1:1/v1",
        "recipe_sha256": "a" * 64,
        "settings": {
            "probe": {"prompt_tokens": prompt_tokens, "max_tokens": 400},
            "pp": [512],
            "tg": [128],
            "depths": [0],
            "table_runs": 3,
            "sweep": {"levels": [1, 2], "requests_per_level": 16, "prompt_tokens": 256, "max_tokens": 128},
            "quality": None,
            "smoke": True,
        },
        "fingerprints": {"dgx1": dict(FP), "dgx2": {**FP, "host": "dgx2"}},
        "decode_probe": {"metrics": {"decode_tps": decode, "ttft_s": ttft}},
        "table": [{"test": "tg128", "depth": 0, "tps_mean": decode}],
        "sweep": [{"concurrency": 1, "aggregate_tps": decode}],
        "quality": None,
    }


def test_a_128_token_probe_against_a_487_token_one_is_refused_not_a_regression():
    verdict = compare(_doc(487, ttft=0.1), _doc(128, ttft=0.37), Thresholds())
    assert verdict.refused and not verdict.ok
    assert verdict.regressions == [] and verdict.deltas == []  # no +270 % "regression"
    assert [m.key for m in verdict.blocking] == ["probe.prompt_tokens"]
    assert (verdict.blocking[0].base, verdict.blocking[0].new) == (487, 128)


def test_forced_comparison_marks_exactly_the_metrics_the_difference_touches():
    verdict = compare(_doc(487, ttft=0.1), _doc(128, ttft=0.37), Thresholds(), force=True)
    assert not verdict.refused and verdict.forced
    marks = {d.name: d.differs for d in verdict.deltas}
    assert marks["ttft_s"] == ("probe.prompt_tokens",) and marks["decode_tps"] == ("probe.prompt_tokens",)
    assert marks["tg128@d0"] == () and marks["aggregate_tps@c1"] == ()  # the sweep and table are alike
    assert len(verdict.regressions) == 1 and "probe.prompt_tokens differ" in verdict.regressions[0]


def test_a_different_driver_refuses_free_memory_does_not():
    new = _doc()
    new["fingerprints"]["dgx2"]["mem_available_bytes"] = 90_000_000_000
    assert compare(_doc(), new, Thresholds()).ok
    new["fingerprints"]["dgx2"]["driver"] = "580.105.08"
    verdict = compare(_doc(), new, Thresholds())
    assert verdict.refused and [m.key for m in verdict.blocking] == ["dgx2.driver"]
    forced = compare(_doc(), new, Thresholds(), force=True)
    assert all(d.differs == ("dgx2.driver",) for d in forced.deltas)  # a host change touches every figure


def test_another_host_set_refuses():
    new = _doc()
    new["fingerprints"]["dgx3"] = {**FP, "host": "dgx3"}
    assert [m.key for m in compare(_doc(), new, Thresholds()).blocking] == ["dgx3"]


def test_what_only_one_report_recorded_is_noted_not_blocking():
    old = _doc()
    del old["fingerprints"]
    del old["settings"]["table_runs"]
    old["recipe_sha256"] = "b" * 64
    verdict = compare(old, _doc(), Thresholds())
    assert verdict.ok and not verdict.blocking
    assert {m.key for m in verdict.mismatches} == {"*", "table_runs", "recipe_sha256"}


def test_a_setting_for_figures_only_one_report_has_does_not_block():
    new = _doc()
    new["settings"]["quality"] = {"short": False, "scenarios": [], "timeout_s": 60}
    new["quality"] = {"status": "ok", "score": 90}
    verdict = compare(_doc(), new, Thresholds())  # the base has no quality score to compare against
    assert verdict.ok and [m.key for m in verdict.mismatches] == ["quality.scenarios", "quality.short"]


def test_markdown_shows_confidence_intervals_settings_and_fingerprints():
    doc = _doc()
    doc["decode_probe"] = {
        "probe": {"prompt_tokens": 487, "max_tokens": 400},
        "metrics": {
            "decode_tps": {"mean": 35.04, "ci95": 0.41, "n": 3},
            "ttft_s": {"mean": 0.1234, "ci95": 0.0031, "n": 3},
            "tpot_s": 0.0285,
            "completion_tokens": 400,
            "chunks": 400,
            "token_source": "continuous_usage",
        },
    }
    doc["sweep"] = [
        {
            "concurrency": 1,
            "requests": 3,
            "failed": 0,
            "aggregate_tps": {"mean": 35.0, "ci95": 0.5, "n": 3},
            "per_request_tps": {"p50": 35.0},
        }
    ]
    text = render_markdown(doc, "stem")
    assert "**35.0 ± 0.4 tok/s**" in text and "123.4 ± 3.1 ms" in text
    assert "| 35.0 ± 0.5 |" in text
    assert "probe.prompt_tokens | 487" in text
    assert "| dgx1 | 6.11.0-1016-nvidia | 580.95.05 | 13.0 | 2.27.7 |" in text


def _cli(*args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "sparkfleet", "report", "compare", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_cli_refuses_with_exit_refused_and_names_the_difference(tmp_path):
    base, new = _doc(487, ttft=0.1), _doc(128, ttft=0.37, created="09:30:00")
    for doc in (base, new):
        (
            tmp_path / f"{doc['created_utc'][:10]}_{doc['created_utc'][11:19].replace(':', '')}_t.json"
        ).write_text(json.dumps(doc))
    refused = _cli("090000", "093000", "--dir", str(tmp_path))
    assert refused.returncode == ExitCode.REFUSED, refused.stdout + refused.stderr
    assert "probe.prompt_tokens: 487 → 128" in refused.stdout and "--force" in refused.stdout
    assert "REGRESSION" not in refused.stdout
    forced = _cli("090000", "093000", "--dir", str(tmp_path), "--force", "--json")
    assert forced.returncode == ExitCode.SHORTFALL
    verdict = json.loads(forced.stdout)
    assert verdict["forced"] and verdict["mismatches"][0]["key"] == "probe.prompt_tokens"
    ttft = next(d for d in verdict["deltas"] if d["name"] == "ttft_s")
    assert ttft["regression"] and ttft["differs"] == ["probe.prompt_tokens"]


def test_other_settings_are_refused_even_when_the_newer_run_failed(tmp_path):
    """A quick run against an interrupted full one exited 1 where the help says 5: the pair is not
    like for like (5 (refused), --force compares it); a failed newer run of the same settings is 1."""
    base = _doc(487, created="09:00:00")
    other = {**_doc(128, created="09:30:00"), "status": "interrupted", "failures": ["interrupted"]}
    same = {**_doc(487, created="10:00:00"), "status": "failed", "failures": ["sweep failed"]}
    for doc in (base, other, same):
        (
            tmp_path / f"{doc['created_utc'][:10]}_{doc['created_utc'][11:19].replace(':', '')}_t.json"
        ).write_text(json.dumps(doc))
    refused = _cli("090000", "093000", "--dir", str(tmp_path))
    assert refused.returncode == ExitCode.REFUSED, refused.stdout + refused.stderr
    assert "probe.prompt_tokens: 487 → 128" in refused.stdout and "--force" in refused.stdout
    assert "093000_t interrupted" in refused.stdout  # the failed run is still said
    forced = _cli("090000", "093000", "--dir", str(tmp_path), "--force")
    assert forced.returncode == ExitCode.SHORTFALL, forced.stdout + forced.stderr
    failed = _cli("090000", "100000", "--dir", str(tmp_path))
    assert failed.returncode == ExitCode.SHORTFALL, failed.stdout + failed.stderr


def test_reports_record_settings_and_fingerprints(tmp_path):
    from sparkfleet.bench.run import BenchRun

    run = BenchRun(tag="t", created_utc="2026-09-27T05:30:09Z", url="http://127.0.0.1:1/v1")
    run.settings = copy.deepcopy(_doc()["settings"])
    run.fingerprints = {"dgx1": dict(FP)}
    run.fingerprints_after = {"dgx1": {**FP, "mem_available_bytes": 100_000_000_000}}
    doc = json.loads(write_report(run, tmp_path).json.read_text())
    assert doc["fingerprints"]["dgx1"]["driver"] == "580.95.05"
    assert doc["fingerprints_after"]["dgx1"]["mem_available_bytes"] == 100_000_000_000
    text = (tmp_path / "2026-09-27_053009_t.md").read_text()
    assert "110.0 GB → 100.0 GB" in text  # free memory before → after


def test_bench_takes_fingerprints_before_and_after_and_records_its_settings(fake_lane, tmp_path):
    from sparkfleet.bench.run import BenchSettings, run_bench
    from sparkfleet.bench.target import for_url

    lane = fake_lane("--decode-tps", "5000", "--prefill-tps", "100000")
    calls = []

    def fingerprint() -> dict:
        calls.append(len(calls))
        return {"dgx1": {**FP, "mem_available_bytes": 100 - len(calls)}}

    run = run_bench(for_url(lane.url, tmp_path), BenchSettings.quick(), "fp", fingerprint=fingerprint)
    assert run.status == "ok", run.failures
    assert calls == [0, 1]
    assert run.fingerprints["dgx1"]["mem_available_bytes"] == 99
    assert run.fingerprints_after["dgx1"]["mem_available_bytes"] == 98
    doc = json.loads(write_report(run, tmp_path).json.read_text())
    assert doc["settings"]["is_quick"] is True and doc["settings"]["probe"]["prompt_tokens"] == 128
    full = copy.deepcopy(doc)
    full["settings"]["is_quick"] = False
    assert compare(full, doc, Thresholds()).refused  # quick vs full: never compared unforced


def test_a_host_that_cannot_be_fingerprinted_is_recorded_and_counts_as_unknown():
    from dataclasses import asdict, dataclass

    from sparkfleet.remote.hoststack import fingerprint_hosts

    @dataclass(frozen=True)
    class Fingerprint:  # the shape of sparkfleet.remote.hoststack.HostFingerprint
        host: str
        driver: str

        def to_dict(self) -> dict:
            return asdict(self)

    def collect(host: str) -> Fingerprint:
        if host == "dgx2":
            raise OSError("ssh: connect to host dgx2 port 22: No route to host")
        return Fingerprint(host, "580.95.05")

    got = fingerprint_hosts(["dgx1", "dgx2"], collect)
    assert got["dgx1"] == {"host": "dgx1", "driver": "580.95.05"}
    assert got["dgx2"]["error"].startswith("OSError: ssh: connect")
    blank = fingerprint_hosts(["dgx3"], lambda h: Fingerprint(h, None))["dgx3"]
    assert blank["driver"] is None and "no stack fact" in blank["error"]
    base, new = _doc(), _doc()
    new["fingerprints"]["dgx2"] = got["dgx2"]
    verdict = compare(base, new, Thresholds())
    assert verdict.ok and verdict.mismatches and not verdict.blocking


def test_settings_that_shape_no_figure_never_block():
    base, new = _doc(), _doc()
    base["settings"]["spec_sample_s"], new["settings"]["spec_sample_s"] = 0.5, 0.25
    new["settings"]["smoke"] = False
    new["settings"]["depths"] = [0, 4096]  # rows are named by depth: pp512@d4096 is simply new
    verdict = compare(base, new, Thresholds())
    assert verdict.ok and not verdict.mismatches
    new["settings"]["table_runs"] = 5  # a mean over 5 runs is not a mean over 3
    assert [m.key for m in compare(base, new, Thresholds()).blocking] == ["table_runs"]


def test_markdown_table_shows_the_rows_confidence_interval_and_net_figure():
    doc = _doc()
    pp = {"test": "pp512", "depth": 4096, "tps_mean": 3901.0, "tps_std": 12.0, "tps_ci95": 29.8}
    pp.update({"tps_net_mean": 4020.0, "tps_net_ci95": 31.0, "runs": 3, "ttft_s_mean": 0.131})
    tg = {"test": "tg128", "depth": 0, "tps_mean": 35.0, "tps_std": 0.2, "runs": 2, "ttft_s_mean": 0.1}
    doc["table"] = [{**pp, "token_source": "usage"}, tg]
    doc["decode_probe"], doc["sweep"] = None, []
    text = render_markdown(doc, "stem")
    assert "| pp512 | d4096 | 3901.0 | 29.8 | 4020.0 ± 31.0 | 3 | 131.0 | usage |" in text
    assert "| tg128 | d0 | 35.0 | 0.2 | — | 2 | 100.0 |" in text  # an older report: its stdev


def test_a_change_inside_both_runs_confidence_intervals_is_marked_as_possible_noise():
    def with_row(mean: float, ci: float | None) -> dict:
        doc = _doc()
        doc["table"] = [{"test": "tg128", "depth": 0, "tps_mean": mean, "tps_ci95": ci}]
        return doc

    t = Thresholds(decode_tps_drop_pct=5)
    noisy = compare(with_row(35.0, 2.0), with_row(33.0, 2.0), t)  # -5.7 %, but |Δ| 2.0 < 2.83
    (delta,) = [d for d in noisy.deltas if d.name == "tg128@d0"]
    assert delta.regression and delta.within_noise is True
    assert any("may be noise" in r for r in noisy.regressions)
    real = compare(with_row(35.0, 0.3), with_row(33.0, 0.3), t)
    assert [d.within_noise for d in real.deltas if d.name == "tg128@d0"] == [False]
    assert not any("noise" in r for r in real.regressions)
    once = compare(with_row(35.0, None), with_row(33.0, 0.3), t)  # measured once: nothing to say
    assert [d.within_noise for d in once.deltas if d.name == "tg128@d0"] == [None]
