"""A bench session decides in the core: where a report goes, what it is compared with, and the smoke.

`record` writes real reports into a lane's folder; `smoke_target` asks a real fake lane (the demo
server in its own process); no CLI in between.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkfleet.base.errors import SparkfleetError
from sparkfleet.bench.client import Endpoint
from sparkfleet.bench.probes import SmokeCase, smoke
from sparkfleet.bench.run import BenchRun
from sparkfleet.bench.session import record, smoke_target, writable_reports_dir
from sparkfleet.bench.target import BenchTarget

ASK = "What is 127*89? Answer with the number only."


def _run(created: str, *, status: str = "ok", decode: float = 35.0) -> BenchRun:
    run = BenchRun(tag="t", created_utc=f"2026-09-27T{created}Z", url="http://127.0.0.1:1/v1", lane="gen")
    run.settings = {"probe": {"prompt_tokens": 487, "max_tokens": 400}, "smoke": True}
    run.table = []
    if status != "ok":
        run.fail("decode probe: server went away")
    return run


def _lane(tmp_path: Path, baseline: str | None = None) -> BenchTarget:
    return BenchTarget(
        url="http://127.0.0.1:1/v1", lane="gen", reports_dir=tmp_path / "reports", baseline=baseline
    )


def test_a_good_lane_run_is_recorded_in_the_lane_and_a_failed_one_in_failed(tmp_path):
    target = _lane(tmp_path)
    good = record(_run("05:30:09"), target)
    assert (
        good.paths.json == tmp_path / "reports" / "2026-09-27_053009_t.json" and good.paths.markdown.is_file()
    )
    assert json.loads(good.paths.json.read_text())["lane"] == "gen" and not good.failed
    bad = record(_run("05:40:00", status="failed"), target)
    assert bad.paths.json.parent == tmp_path / "reports" / "failed" and bad.failed
    forced = record(_run("05:50:00", status="failed"), target, save_to_lane=True)
    assert forced.paths.json.parent == tmp_path / "reports"
    elsewhere = record(_run("06:00:00"), target, out=tmp_path / "mine")
    assert elsewhere.paths.json.parent == tmp_path / "mine"


def test_a_good_run_is_compared_with_the_baseline_and_an_unreadable_baseline_is_only_a_warning(tmp_path):
    first = record(_run("05:30:09"), _lane(tmp_path))
    compared = record(_run("05:40:00"), _lane(tmp_path, baseline=first.paths.json.stem))
    assert compared.comparison is not None and compared.comparison.base == first.paths.json.stem
    assert compared.comparison.new == compared.paths.json.stem and compared.warnings == []
    lost = record(_run("05:50:00"), _lane(tmp_path, baseline="2026-01-01_000000_gone"))
    assert lost.comparison is None and not lost.failed
    gone = "'2026-01-01_000000_gone'"
    assert lost.warnings == [f"baseline {gone} not compared: no report {gone} in {tmp_path / 'reports'}"]
    failed = record(_run("06:00:00", status="failed"), _lane(tmp_path, baseline=first.paths.json.stem))
    assert failed.comparison is None and failed.warnings == []  # a failed run is not compared


def test_a_reports_folder_inside_the_nix_store_is_refused_before_any_request(tmp_path):
    with pytest.raises(SparkfleetError, match="inside the Nix store") as caught:
        writable_reports_dir(Path("/nix/store/0123456789abcdfghijklmnpqrsvwxyz-source/recipes/x/reports"))
    assert "--out" in (caught.value.hint or "")
    assert (
        writable_reports_dir(tmp_path / "a" / "b") == tmp_path / "a" / "b" and not (tmp_path / "a").exists()
    )


def test_smoke_asks_every_case_and_a_lane_names_its_recipe_as_the_knob(fake_lane):
    lane = fake_lane("--reasoning-tokens", "100", "--decode-tps", "20000")
    url_run = smoke_target(BenchTarget(url=lane.url), timeout=30.0)
    assert url_run.ok and [c.answer for c in url_run.cases] == ["11303", "42"] and url_run.model
    cut = smoke_target(BenchTarget(url=lane.url, lane="gen"), timeout=30.0, max_tokens=64)
    assert not cut.ok and all(c.finish_reason == "length" for c in cut.cases)
    assert all("raise smoke.max_tokens in the recipe" in c.problem for c in cut.cases)
    seen = []
    outcomes = smoke(
        Endpoint(lane.url, "m"), [SmokeCase(ASK, "11303"), SmokeCase(ASK, "1")], on_case=seen.append
    )
    assert seen == outcomes and [o.passed for o in outcomes] == [
        True,
        False,
    ]  # one wrong answer skips nothing
