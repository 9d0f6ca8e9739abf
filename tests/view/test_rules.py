"""The alert rules: Debian's promtool checks them and runs their unit tests (tests/view/rules-test.yml),
every rule has a case there, and every series a rule reads is one the exporter emits."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sparkfleet.view.metrics import METRICS
from sparkfleet.view.targets import rules_path

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing (Debian package prometheus)")
CASES = Path(__file__).with_name("rules-test.yml")


def _alerts(text: str) -> list[str]:
    return re.findall(r"^\s*- alert: (\S+)", text, re.M)


@needs_promtool
@pytest.mark.system
def test_promtool_checks_the_rules():
    done = subprocess.run([PROMTOOL, "check", "rules", str(rules_path())], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_alerts(rules_path().read_text()))} rules found" in done.stdout


@needs_promtool
@pytest.mark.system
def test_promtool_unit_tests_pass(tmp_path):
    cases = tmp_path / "rules-test.yml"
    cases.write_text(CASES.read_text().replace("  - RULES\n", f"  - {rules_path()}\n"))
    done = subprocess.run([PROMTOOL, "test", "rules", str(cases)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@needs_promtool
@pytest.mark.system
def test_a_rule_that_fires_on_a_stopped_lane_fails_the_unit_tests(tmp_path):
    """The cases can fail: LaneDown without its `wanted` term fires on a lane the operator stopped."""
    broken = tmp_path / "rules.yml"
    broken.write_text(rules_path().read_text().replace("sparkfleet_lane_wanted == 1 and ", ""))
    cases = tmp_path / "rules-test.yml"
    cases.write_text(CASES.read_text().replace("  - RULES\n", f"  - {broken}\n"))
    done = subprocess.run([PROMTOOL, "test", "rules", str(cases)], capture_output=True, text=True)
    assert done.returncode != 0 and 'lane="stopped"' in done.stdout + done.stderr


def test_every_rule_has_a_case_and_reads_only_exported_series():
    rules = rules_path().read_text()
    tested = set(re.findall(r"alertname: (\S+)", CASES.read_text()))
    assert set(_alerts(rules)) == tested
    exported = {m.exposed for m in METRICS}
    read = set(re.findall(r"\bsparkfleet_[a-z_]+", rules))
    assert read and read <= exported, read - exported
