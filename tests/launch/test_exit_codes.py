"""Issue 10.17: an unreachable host gave exit 1 in some verbs and 4 in others; one table (ExitCode) now.

A host whose ssh port refuses connections (OpenSSH exits 255): every verb that must reach it
exits with ExitCode.UNREACHABLE and names the host, without a traceback.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sparkfleet.base.errors import ExitCode
from support.lanefleet import MODELS, write_fleet
from support.launch_fleet import host_fields

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client")

RECIPE = (
    """
[lane]
hosts = ["far1", "far2"]

[world]
tp = 2

[launch]
runtime = "process"
fabric = "none"
command = ["serve"]
"""
    + MODELS
)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        return s.getsockname()[1]  # closed once the socket is: connections are refused


@pytest.fixture
def far_fleet(tmp_path: Path) -> Path:
    port = closed_port()
    hosts = {
        h: host_fields(h, tmp_path, address="127.0.0.2", ssh_port=port, ssh_user="nobody")
        for h in ("far1", "far2")
    }
    return write_fleet(tmp_path / "fleet", hosts, {"lane": RECIPE})


def run(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparkfleet", "--root", str(root), *args],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.mark.parametrize(
    "verb",
    [("stage", "far1"), ("doctor", "far1"), ("stop", "lane"), ("launch", "lane")],
    ids=lambda v: v[0],
)
def test_unreachable_host_is_exit_4_in_every_verb(far_fleet, verb):
    proc = run(far_fleet, *verb)
    out = proc.stdout + proc.stderr
    assert proc.returncode == ExitCode.UNREACHABLE, (proc.returncode, out)
    assert "far1" in out or "far2" in out
    assert "Traceback" not in out


def test_readme_has_one_exit_code_table_matching_the_enum():
    readme = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()  # linked from README
    start = readme.index("## Exit codes")
    section = readme[start : readme.find("\n## ", start + 3)]
    rows = [line for line in section.splitlines() if line.startswith("| ") and line[2:3].isdigit()]
    table = section[section.index("|") : section.rindex("|") + 1]
    assert "\n\n" not in table, "a blank line inside the table breaks it"
    got = {int(r.split("|")[1]): r.split("|")[2].strip().strip("`") for r in rows}
    assert got == {int(c): c.name for c in ExitCode}
