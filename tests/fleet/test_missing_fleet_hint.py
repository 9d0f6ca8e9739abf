"""A newcomer after `make demo` who forgot SPARKFLEET_ROOT is told where the demo's fleet is.

Outside any fleet the error said "pass --root, or set SPARKFLEET_ROOT" and never which root; inside
the checkout, `status demo-exl3-2x` found the real fleet and said only "unknown lane".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkfleet.base.errors import ExitCode

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def sparkfleet(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SPARKFLEET_ROOT"}
    return subprocess.run([sys.executable, "-m", "sparkfleet", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def demo_checkout(where: Path, with_fleet: bool) -> Path:
    """A folder laid out as a checkout after `make demo` (only the files the lookup reads)."""
    demo = where / ".demo" / "fleet"
    (demo / "hosts").mkdir(parents=True)
    (demo / "hosts" / "fleet.toml").write_text("schema_version = 1\n")
    (demo / "recipes" / "demo-exl3-2x").mkdir(parents=True)
    if with_fleet:
        (where / "hosts").mkdir()
        (where / "hosts" / "fleet.toml").write_text((ROOT / "hosts" / "fleet.toml").read_text())
    return demo


def test_no_fleet_here_names_the_demo_fleet_of_this_checkout(tmp_path):
    demo_checkout(tmp_path, with_fleet=False)
    (tmp_path / "docs").mkdir()
    done = sparkfleet(tmp_path / "docs", "status", "demo-exl3-2x")
    assert done.returncode == ExitCode.USAGE
    assert "no hosts/fleet.toml" in done.stderr
    assert "pass --root ../.demo/fleet" in done.stderr
    assert f"SPARKFLEET_ROOT={tmp_path.resolve()}/.demo/fleet" in done.stderr


def test_no_fleet_and_no_demo_says_what_make_demo_gives(tmp_path):
    done = sparkfleet(tmp_path, "status", "demo-exl3-2x")
    assert done.returncode == ExitCode.USAGE and "after `make demo`: --root .demo/fleet" in done.stderr


def test_the_demo_lane_asked_of_the_checkouts_fleet_points_at_the_demo(tmp_path):
    demo_checkout(tmp_path, with_fleet=True)
    done = sparkfleet(tmp_path, "status", "demo-exl3-2x")
    assert done.returncode == ExitCode.USAGE and "unknown lane 'demo-exl3-2x'" in done.stderr
    assert "demo-exl3-2x is a lane of the demo" in done.stderr and "--root .demo/fleet" in done.stderr
    other = sparkfleet(tmp_path, "status", "no-such-lane")  # the control: a lane the demo lacks
    assert "lane of the demo" not in other.stderr and "a lane is a folder" in other.stderr
