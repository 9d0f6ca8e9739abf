"""Fixtures for staging tests: a NAS-like hub built by the same builder the demo uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkfleet.demo.hubfixture import HubFixture, build_nas_hub


@pytest.fixture
def nas(tmp_path: Path) -> HubFixture:
    return build_nas_hub(tmp_path / "nas" / "hub", shard_bytes=256 * 1024)


@pytest.fixture
def local(tmp_path: Path) -> Path:
    return tmp_path / "nvme" / "hub"


@pytest.fixture
def big_nas(tmp_path: Path) -> HubFixture:
    """Shards large enough (4 MiB) that sampled verification reads windows, not whole files."""
    return build_nas_hub(tmp_path / "nas" / "hub", shard_bytes=4 * 1024 * 1024)
