"""The roofline section read from a report document, and `report compare` showing it side by side."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkfleet.bench.report import compare
from sparkfleet.bench.target import Thresholds
from sparkfleet.demo.synthmodel import SynthSpec, checkpoint_files
from sparkfleet.roofline.bound import LaneShape
from sparkfleet.roofline.machine import MachineFigures, Primitive
from sparkfleet.roofline.model import model_cost, snapshot_files
from sparkfleet.roofline.section import build_section, markdown_lines

GB = 1e9


@pytest.fixture
def inputs(tmp_path: Path) -> dict:
    from dataclasses import asdict

    for name, data in checkpoint_files(SynthSpec(hidden=256)).items():
        (tmp_path / name).write_bytes(data)
    config, files = snapshot_files(tmp_path)
    return {"host": "dgx1", "origin": "local", "target": asdict(model_cost("w", config, files))}


MACHINE = MachineFigures(
    "dgx1", "k", {n: Primitive(n, v, "declared", v, "sheet") for n, v in
                  {"memory_bandwidth": 100 * GB, "peak_fp8": 1e14, "fabric_link": 25 * GB}.items()}
)  # fmt: skip


def report(decode: float, pp: float | None = 900.0, accept: float | None = None) -> dict:
    return {
        "status": "ok",
        "settings": {"probe": {"prompt_tokens": 487, "max_tokens": 400}},
        "decode_probe": {"metrics": {"decode_tps": decode}},
        "table": [
            {"test": "pp512", "depth": 4096, "tps_mean": pp},
            {"test": "tg128", "depth": 0, "tps_mean": 1},
        ],
        "spec_accept": {"value": accept, "source": "metrics"} if accept else None,
    }


def test_the_section_reads_the_run_and_names_what_binds(inputs: dict) -> None:
    section = build_section(report(30.0), inputs, MACHINE, LaneShape(tp=2))
    decode = section["decode"]
    assert decode["context"] == 487 + 200  # the probe's mean decode context
    assert decode["measured_tps"] == 30.0
    assert decode["pct_of_bound"] == pytest.approx(100 * 30.0 / decode["bound_tps"])
    (pp,) = section["prefill"]  # tg rows are not prefill
    assert (pp["test"], pp["depth"], pp["tokens"]) == ("pp512", 4096, 512)
    assert section["machine"]["figures"]["memory_bandwidth"]["source"] == "sheet"
    md = "\n".join(markdown_lines(section))
    pct = decode["pct_of_bound"]
    shown = f"{pct:.0f} %" if pct >= 10 else f"{pct:.2g} %"  # small ones keep 2 significant digits
    assert f"= {shown} of the" in md and "| pp512 | 4096 |" in md


def test_a_failed_probe_gives_no_figure_and_says_why(inputs: dict) -> None:
    doc = report(30.0, pp=None)
    doc["decode_probe"] = {"metrics": {"decode_tps": None}}
    section = build_section(doc, inputs, MACHINE, LaneShape(tp=2))
    assert section["decode"] is None and section["prefill"] == []
    assert "the decode probe measured no decode rate: no % of bound" in section["notes"]


def test_speculative_lanes_fold_in_the_measured_accept_length(inputs: dict) -> None:
    section = build_section(report(60.0, accept=2.5), inputs, MACHINE, LaneShape(tp=2, draft_tokens=3))
    assert section["decode"]["tokens_per_step"] == 2.5
    assert section["decode"]["draft_yield_pct"] == pytest.approx(62.5)


def test_compare_shows_pct_of_bound_side_by_side_without_judging(inputs: dict) -> None:
    base, new = report(30.0), report(27.0)
    base["roofline"] = build_section(base, inputs, MACHINE, LaneShape(tp=2))
    new["roofline"] = build_section(new, inputs, MACHINE, LaneShape(tp=2))
    result = compare(base, new, Thresholds(decode_tps_drop_pct=15))
    shown = {d.name: d for d in result.deltas}
    assert shown["decode_pct_of_bound"].limit == "shown"
    assert shown["decode_pct_of_bound"].change_pct == pytest.approx(-10.0)
    assert not shown["decode_pct_of_bound"].regression and result.ok
    assert "pp512@d4096_pct_of_bound" in shown
