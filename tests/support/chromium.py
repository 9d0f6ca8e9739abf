"""Debian's chromium, headless, for the tests that check a page as a browser renders it.

One runner for every such test (the bench history page, the fleet view's page): a private
profile per call under the test's tmp_path, its own session so that chromium and every child it
started are ended together (by that session's process group, never by name) if it overruns.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")


def run_chromium(tmp_path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`chromium --headless ... ARGS` with a fresh profile; its output, within `timeout` seconds."""
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.glob('chromium-profile-*')))}"
    argv = [
        CHROMIUM or "chromium",
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--disable-dev-shm-usage",  # containers often have a 64 MiB /dev/shm
        f"--user-data-dir={profile}",
        *args,
    ]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:  # our own session only: chromium and the children it started
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
