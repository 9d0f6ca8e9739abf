"""`make test`'s `-n N --dist loadgroup` keeps a module marked xdist_group on one worker (xdistgroups.py).

Without tests/conftest.py's scheduler, pytest 9.2 + pytest-xdist 3.8 spread the group over every
worker (pytest-dev/pytest-xdist#1386): this test then fails on the worker count.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.xdistgroups import module_group

TESTS = Path(__file__).resolve().parents[1]
GROUPED = """import time, pytest
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("shared_fleet")]
@pytest.mark.parametrize("i", range(6))
def test_grouped(i):
    time.sleep(0.2)
"""
FREE = """import time, pytest
@pytest.mark.parametrize("i", range(6))
def test_free(i):
    time.sleep(0.2)
"""
CONFTEST = f"""import sys
sys.path.insert(0, {str(TESTS)!r})
from support.xdistgroups import make_scheduler
def pytest_xdist_make_scheduler(config, log):
    return make_scheduler(config, log) if config.getvalue("dist") == "loadgroup" else None
"""


def test_the_group_is_read_from_the_modules_mark(tmp_path):
    (tmp_path / "test_a.py").write_text(GROUPED)
    (tmp_path / "test_b.py").write_text(FREE)
    (tmp_path / "test_c.py").write_text('pytestmark = pytest.mark.xdist_group(name="other")\n')
    assert module_group(tmp_path / "test_a.py") == "shared_fleet"
    assert module_group(tmp_path / "test_b.py") is None
    assert module_group(tmp_path / "test_c.py") == "other"
    assert module_group(tmp_path / "missing.py") is None


@pytest.mark.slow
def test_a_grouped_module_runs_on_one_worker_the_rest_spread(tmp_path):
    pytest.importorskip("xdist")
    (tmp_path / "test_a.py").write_text(GROUPED)
    (tmp_path / "test_b.py").write_text(FREE)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "3", "--dist", "loadgroup", "-v",
         "-c", "/dev/null", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = re.findall(r"\[(gw\d+)\] \[\s*\d+%\] PASSED (test_\w)\.py", proc.stdout)
    workers = {mod: {gw for gw, m in ran if m == mod} for mod in ("test_a", "test_b")}
    assert len(ran) == 12, proc.stdout
    assert len(workers["test_a"]) == 1, workers  # the group: one worker
    assert len(workers["test_b"]) > 1, workers  # the others: wherever a worker is free
