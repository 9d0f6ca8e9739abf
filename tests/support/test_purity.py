"""`pytest --pure` (make check) keeps its promise: it leaves out what its rules call heavy, and a
test it keeps that starts a heavy program fails naming the test and the program."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

SUITE = '''
import os, subprocess, sys
import pytest

def test_counts():
    assert 6 * 7 == 42

def test_starts_the_real_ip():
    subprocess.run(["ip", "-V"], capture_output=True)

def test_a_stand_in_named_docker_is_no_container(tmp_path):
    fake = tmp_path / "docker"
    fake.write_text("#!/bin/sh\\necho stand-in\\n")
    fake.chmod(0o755)
    assert subprocess.run([str(fake)], capture_output=True, text=True).stdout == "stand-in\\n"

@pytest.mark.netns
def test_marked_netns():
    pass

@pytest.mark.slow
def test_marked_slow():
    pass

def test_uses_the_netns_fleet(fleetnet):
    pass
'''


def run_pure(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_planted.py").write_text(SUITE)
    (tmp_path / "conftest.py").write_text(
        "import pytest\n\n@pytest.fixture\ndef fleetnet():\n    raise AssertionError('never set up')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "support.purity",
         "--pure", "-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip


def test_pure_runs_what_needs_nothing_and_refuses_a_real_heavy_program(tmp_path):
    out = run_pure(tmp_path)
    text = out.stdout + out.stderr
    assert "PASSED test_planted.py::test_counts" in text, text
    assert "PASSED test_planted.py::test_a_stand_in_named_docker_is_no_container" in text, text
    assert "FAILED test_planted.py::test_starts_the_real_ip" in text, text
    assert "test_starts_the_real_ip is selected as pure (make check) but starts ip" in text, text
    assert "3 deselected" in text, text  # marked netns, marked slow, the netns fleet
    assert out.returncode == 1, text
