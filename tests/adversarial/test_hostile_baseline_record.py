"""A generation record's `promotion.bench_report` names the report that made it good; with no
[bench] baseline declared that report is what promote and `report compare` hold later reports to.
The record is a file in the fleet checkout: whatever it names, the gate reads only a report of
that name in the lane's own reports folder, and anything else leaves the lane without a baseline
(refused, naming the fix), never compared against a file it points at."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from sparkfleet.bench.gate import baseline_of, judge
from sparkfleet.bench.target import BenchTarget, Thresholds
from sparkfleet.launch.generations import save, utc_id

from .tally import bad_input

SURFACE = "generation-promotion-report"
LANE = "gen"
UP = 1_800_000_000.0


def _report(folder: Path, stem: str, decode: float = 35.0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.json"
    path.write_text('{"schema": "sparkfleet.bench/1", "status": "ok", "settings": {}, "quality": null, '
                    f'"decode_probe": {{"metrics": {{"decode_tps": {decode}}}}}}}')  # fmt: skip
    return path


def _good(root: Path, report: object) -> None:
    recipe = "[lane]\n"
    save(root, {"id": utc_id(UP - 7200), "lane": LANE, "created_at": UP - 7200, "status": "ready",
                "good": True, "recipe_text": recipe, "fleet_text": "",
                "recipe_sha256": hashlib.sha256(recipe.encode()).hexdigest(),
                "promotion": {"bench_report": report, "promoted": True}})  # fmt: skip


@pytest.mark.surface("file:generation record")
@pytest.mark.parametrize("named", ["/etc/passwd", "../../../x/2026-09-27_080000_base.json", "latest", "*",
                                   "2026-09-27_080000_gone", 7, None])  # fmt: skip
def test_a_good_generation_names_a_report_it_can_only_name_not_point_at(tmp_path, named, figures):
    target = BenchTarget(url="http://127.0.0.1:1/v1", lane=LANE, thresholds=Thresholds(),
                         reports_dir=tmp_path / "recipes" / LANE / "reports")  # fmt: skip
    new = _report(target.reports_dir, "2026-09-27_093000_new")
    os.utime(new, (UP + 9, UP + 9))  # made after the generation came up
    outside = tmp_path / "x"
    _report(outside, "2026-09-27_080000_base", decode=1000.0)  # outside the lane's folder: never read
    _good(tmp_path, named)
    base = baseline_of(target, tmp_path)
    bad_input(figures, SURFACE, refused=base.path is None)
    if named == "../../../x/2026-09-27_080000_base.json":  # its name is looked up in the lane's folder
        assert base.path is None and "is gone" in base.said
    else:
        assert base.path is None and not base.first_night, base
    verdict = judge(target, UP, root=tmp_path)
    assert not verdict.passed and verdict.regressions == ["set [bench] baseline or pass --first"]


