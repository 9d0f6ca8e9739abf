"""docs/fleet-ops.md's metrics table is the exporter's registry rendered, and says what a scrape says."""

from __future__ import annotations

import re
from pathlib import Path

from sparkfleet.view import metricsdoc
from sparkfleet.view.metrics import registry_for, render
from sparkfleet.view.snapshot import FleetSnapshot

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_table_is_the_registry_rendered():
    committed = (ROOT / metricsdoc.DOC).read_text()
    hint = "regenerate: python -m sparkfleet.view.metricsdoc --write"
    assert committed == metricsdoc.render(committed), hint


def test_every_family_a_scrape_declares_is_a_row_with_its_type_and_help():
    scrape = render(registry_for(lambda: FleetSnapshot(0.0, 0.0, 0, None, (), ()))).decode()
    declared = dict(re.findall(r"^# TYPE (\S+) (\S+)$", scrape, re.M))
    helps = dict(re.findall(r"^# HELP (\S+) (.+)$", scrape, re.M))
    rows = {m.group(1): (m.group(2), m.group(3)) for m in
            re.finditer(r"^\| `(\S+)` \| (\w+) \| [^|]+ \| (.+) \|$", metricsdoc.table(), re.M)}  # fmt: skip
    assert set(rows) == set(declared) and len(rows) >= 40
    for name, (kind, meaning) in rows.items():
        assert declared[name] == kind and helps[name] == meaning, name


def test_a_page_without_the_markers_is_refused():
    import pytest

    with pytest.raises(ValueError, match="lacks the markers"):
        metricsdoc.render("# no table here\n")
