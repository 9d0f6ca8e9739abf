"""Fixtures for engram pack tests: a NAS hub holding a checkpoint-like repo, and fleets over it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from engram_helpers import PARTS_TABLES, EngramFleet, write_fleet

from sparkfleet.demo.hubfixture import build_engram_repo


@pytest.fixture
def make_fleet(tmp_path: Path) -> Callable[..., EngramFleet]:
    """make_fleet(rows=..., with_index=...) -> a 4-host fleet over a fresh NAS hub."""

    def make(rows: dict[int, int] | None = None, with_index: bool = True) -> EngramFleet:
        nas = tmp_path / "nas" / "hub"
        truth = build_engram_repo(nas, rows=rows or {1: 1001, 14: 1003}, with_index=with_index)
        return write_fleet(tmp_path, truth, nas, ("h1", "h2", "h3", "h4"))

    return make


@pytest.fixture
def fleet(make_fleet) -> EngramFleet:
    f = make_fleet()
    f.add_lane("eng4", ["h1", "h2", "h3", "h4"], PARTS_TABLES)
    f.add_lane("eng3", ["h2", "h3", "h4"], PARTS_TABLES)
    return f
