"""The README's night, on the demo: every command of "A night, in commands" and "When something
breaks", read from the README's own code blocks, pointed at the demo's lane, in order.

The demo is made the way `make demo` makes it (`sparkfleet demo --workdir DIR --fresh`, which stops
its lane when it ends); then each command runs as an operator types it, in a shell whose
SPARKFLEET_ROOT names the demo fleet (the README's set-up). Each must exit 0 and print no
traceback, and the whole night — a full bench included — must take under ten minutes here.

Three commands never end by themselves: `watch LANE` probes, `logs LANE -f` follows and `view
serve` serves the fleet page, each until Ctrl-C. Each is run as on a terminal, until it shows it
works (the watch's heartbeat line, the log's first line, the page's address), then ended with
Ctrl-C (SIGINT), as an operator does.
"""

from __future__ import annotations

import os
import pty
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparkfleet.demo.fleet import DEMO_LANE
from support.demolane import read_until

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## A night, in commands"
README_LANES = re.compile(r"\bdsv41-flash-[a-z0-9-]+\b")  # the real lanes the README's night names
NIGHT_LIMIT_S = 600.0

pytestmark = [
    pytest.mark.xdist_group("local_lanes"),  # the demo lane's ports and the rendezvous port
    pytest.mark.serial,  # bound by time: the whole night in under ten minutes
    pytest.mark.timeout(1500),
]


def night_commands(text: str) -> list[list[str]]:
    """Every `sparkfleet ...` line of the README's night section's shell blocks, comments cut, the
    README's lanes replaced by the demo's, in order."""
    section = text.split(f"\n{SECTION}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    commands = []
    for block in blocks:
        for line in block.splitlines():
            line = line.split("  #", 1)[0].strip()
            if line.startswith("sparkfleet "):
                commands.append(shlex.split(README_LANES.sub(DEMO_LANE, line)))
    return commands


def test_the_readme_night_is_parsed_as_written():
    commands = night_commands(README.read_text())
    verbs = [" ".join(c[1:3]) for c in commands]
    assert len(commands) >= 15, verbs  # the night and what to do when something breaks
    assert all(DEMO_LANE in c for c in commands if c[1] not in ("inventory", "view")), commands
    assert ["sparkfleet", "bench", DEMO_LANE] in commands  # the full bench, not --quick


@dataclass
class Ran:
    argv: list[str]
    code: int | None
    output: str
    seconds: float

    def line(self) -> str:
        return f"{self.seconds:6.1f} s  exit {self.code}  {shlex.join(self.argv)}"


def _on_a_terminal(argv: list[str], env: dict, cwd: Path, shows: str, timeout: float = 180) -> Ran:
    """Run on a pseudo-terminal until `shows` appears, then Ctrl-C, as an operator ends it."""
    leader, follower = pty.openpty()
    started = time.monotonic()
    proc = subprocess.Popen(_python(argv), stdin=follower, stdout=follower, stderr=follower, env=env,
                            cwd=cwd, close_fds=True)  # fmt: skip
    os.close(follower)
    try:
        out = read_until(leader, shows, timeout)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # our own child, by its PID
        out += read_until(leader, r"$^", 5)  # what it says on the way out
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    return Ran(argv, code, out, time.monotonic() - started)


def _python(argv: list[str]) -> list[str]:
    """`sparkfleet ...` as the venv's `sparkfleet` runs it: this interpreter, the package's main."""
    return [sys.executable, "-m", "sparkfleet", *argv[1:]]


def _run(argv: list[str], env: dict, cwd: Path) -> Ran:
    started = time.monotonic()
    proc = subprocess.run(_python(argv), capture_output=True, text=True, env=env, cwd=cwd,
                          stdin=subprocess.DEVNULL, timeout=900)  # fmt: skip
    return Ran(argv, proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started)


def test_the_readme_night_runs_on_the_demo(tmp_path):
    workdir, cwd = tmp_path / "demo", tmp_path / "operator"
    cwd.mkdir()
    env = {**os.environ, "SPARKFLEET_ROOT": str(workdir / "fleet"), "TERM": "xterm"}
    env.pop("NO_COLOR", None)
    made = time.monotonic()
    demo = subprocess.run(_python(["sparkfleet", "demo", "--workdir", str(workdir), "--fresh"]),
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=900)  # fmt: skip
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    demo_s = time.monotonic() - made
    ran: list[Ran] = []
    try:
        night = time.monotonic()
        for argv in night_commands(README.read_text()):
            if argv[1] == "watch":  # probes until Ctrl-C: on a terminal, a heartbeat per probe
                ran.append(_on_a_terminal(argv, env, cwd, rf"♥ {DEMO_LANE}: probe 1 ok"))
            elif argv[1] == "logs" and "-f" in argv:  # follows until Ctrl-C
                ran.append(_on_a_terminal(argv, env, cwd, r"\S+\r?\n"))
            elif argv[1:3] == ["view", "serve"]:  # serves the page until Ctrl-C
                ran.append(_on_a_terminal(argv, env, cwd, r"Ctrl-C stops it"))
            else:
                ran.append(_run(argv, env, cwd))
        night_s = time.monotonic() - night
    finally:
        subprocess.run(_python(["sparkfleet", "stop", DEMO_LANE]), env=env, cwd=cwd, capture_output=True,
                       timeout=120)  # fmt: skip  (whatever happened, no demo server outlives the test)
    summary = "\n".join(r.line() for r in ran)
    print(f"\ndemo made in {demo_s:.1f} s; the night:\n{summary}\n  night: {night_s:.1f} s")
    failed = [r for r in ran if r.code != 0 or "Traceback" in r.output]
    assert not failed, "\n\n".join(f"{r.line()}\n{r.output[-2500:]}" for r in failed)
    assert night_s < NIGHT_LIMIT_S, summary
    bench = next(r for r in ran if r.argv[1:3] == ["bench", DEMO_LANE])
    assert "quality not run: the demo server has no model" in bench.output
    assert "error: interrupted" not in "".join(r.output for r in ran)
