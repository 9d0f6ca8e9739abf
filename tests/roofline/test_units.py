"""One unit formatter: bytes/s as GB/s, links as Gb/s, FLOP/s as TFLOP/s (`roofline` printed
`fabric_link: 25000000000.0`, `measure` printed `G/s`)."""

from __future__ import annotations

import re
from pathlib import Path

from sparkfleet.base import units
from sparkfleet.roofline.machine import FIGURES, figure_text

PKG = Path(units.__file__).parent


def test_each_kind_of_figure_has_its_unit():
    assert figure_text("fabric_link", 25e9) == "200 Gb/s"  # 200 GbE, stored in bytes/s
    assert figure_text("nas_link", 1.25e9) == "10 Gb/s"
    assert figure_text("memory_bandwidth", 273e9) == "273.00 GB/s"
    assert figure_text("nvme_read", 35e6) == "35.0 MB/s"
    assert figure_text("peak_fp8", 500e12) == "500.0 TFLOP/s"
    assert figure_text("fabric_latency", 12e-6) == "12.0 µs"
    assert figure_text("peak_bf16", None) == "unknown"
    assert all(figure_text(name, 1e9) != str(1e9) for name in FIGURES)


def test_no_verb_prints_a_bare_rate_or_g_per_s():
    for path in (PKG / "cli").glob("*.py"):
        text = path.read_text()
        assert " G/s" not in text, path
        assert not re.search(r"/ 1e6:\.\d*f\} MB/s", text), path  # byte rates go through units
