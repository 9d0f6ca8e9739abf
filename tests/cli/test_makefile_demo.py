"""`make demo` installs only what the demo needs, visibly (read from `make -n`, nothing runs)."""

from __future__ import annotations

import os
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
    # the gateway's smg too: `gateway up` on the demo died on "No module named 'smg'"
    assert any('-e ".[gateway]"' in line for line in installs), installs
    assert "sparkfleet demo --workdir .demo" in out.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_demo_never_deletes_its_records_behind_sparkfleets_back_and_pip_noise_is_filtered(tmp_path):
    """`rm -rf .demo` deleted the records of a lane still serving; the demo now stops it first."""
    out = subprocess.run(
        ["make", "-n", "-B", "demo", f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "rm -rf" not in out.stdout
    assert "sparkfleet demo --workdir .demo --fresh" in out.stdout
    install = next(ln for ln in out.stdout.splitlines() if "pip install" in ln)
    assert "--progress-bar on" in install and "grep -v \"^WARNING: Location \"" in install
    assert install.startswith("bash -o pipefail")  # pip's exit status survives the filter


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_shell_puts_sparkfleet_on_path(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / ".demo-deps").touch()
    (venv / "bin" / "sparkfleet").write_text("#!/bin/sh\necho fake sparkfleet\n")
    (venv / "bin" / "sparkfleet").chmod(0o755)
    (venv / "bin" / "python").symlink_to(shutil.which("python3"))
    out = subprocess.run(
        ["make", "-s", "shell", f"VENV={venv}"], cwd=ROOT, input="command -v sparkfleet\n",
        capture_output=True, text=True, timeout=60, env={**os.environ, "SHELL": "/bin/sh"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "sparkfleet is on PATH here" in out.stdout
    assert str(venv / "bin" / "sparkfleet") in out.stdout
