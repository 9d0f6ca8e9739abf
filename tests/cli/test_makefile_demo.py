"""`make demo` installs only what the demo needs, visibly (read from `make -n`, nothing runs)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_demo_installs_runtime_deps_only_and_visibly(tmp_path):
    out = subprocess.run(
        ["make", "-n", "-B", "demo", f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    installs = [ln for ln in out.stdout.splitlines() if "pip install" in ln]
    assert installs, out.stdout
    for line in installs:
        assert "[test]" not in line, f"the demo pulls test-only packages: {line}"
        assert " -q" not in line, f"a silent install: {line}"
    assert "sparkfleet demo --workdir .demo" in out.stdout
