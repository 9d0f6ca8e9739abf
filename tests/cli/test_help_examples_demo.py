"""Every `--help` example runs as written against the demo: a fresh `sparkfleet demo --workdir .demo`
in a scratch "checkout", then each example through bash, help page by help page in the order a night
reads them, each page's examples top to bottom: as a reader meets them (`gateway up`'s page shows
`gateway down` before its second `up`).

What a newcomer does after `make demo`: `export SPARKFLEET_ROOT=$PWD/.demo/fleet` and try the
examples. So each runs in the scratch folder (cwd and HOME), with sparkfleet on PATH and
SPARKFLEET_ROOT at the demo fleet, and must exit 0 with no traceback; one with `--json` prints one
JSON document. The lane is up for the examples that ask it, and stopped for `launch` and `demo`'s,
which start it themselves. Examples marked `# real fleet` are not run here (test_help_examples.py
parses them and checks the lanes and hosts they name); `# until Ctrl-C` ones get Ctrl-C after a
few seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpexamples import Example, all_examples

from sparkfleet.demo.fleet import DEMO_LANE

# launches lanes on this machine, on the demo's fixed ports: one worker, one module at a time
pytestmark = pytest.mark.xdist_group("local_lanes")

BIN = Path(sys.executable).parent
# A night's order of help pages: each page is read after the verbs it builds on (a report before
# compare, a promoted generation before rollback, the gateway up before its users' keys). A page not
# listed is read after these, in tree order.
NIGHT = [
    "inventory", "pins", "stage", "verify", "engram", "env", "manifest", "roofline", "measure", "doctor",
    "launch", "status", "logs", "smoke", "bench", "report", "promote", "history", "watch", "rollback",
    "keys rotate", "gateway up", "gateway status", "keys", "gateway down", "gateway",
    "image", "power", "bootstrap", "registry", "release", "stop", "demo",
]  # fmt: skip
# Verbs whose examples start the lane themselves run with it stopped; those that ask the serving
# lane, with it up; the rest (staging, planning, reading the fleet) either way, as they find it.
LANE_DOWN = {"launch", "demo"}
LANE_UP = {"status", "logs", "smoke", "bench", "promote", "watch", "rollback", "stop", "keys", "gateway"}


def verb_of(example: Example) -> str:
    """The example's verb (its first word that is not an option or the value of --root)."""
    words = [w for i, w in enumerate(example.argv) if not w.startswith("-") and
             (i == 0 or example.argv[i - 1] != "--root")]  # fmt: skip
    return words[0]


def night_key(example: Example) -> int:
    """Where the page showing the example comes in NIGHT (its longest entry that the page's verb
    starts with); the root's own examples (`sparkfleet --help`) where the verb they run comes."""
    words = example.shown_in or " ".join(w for w in example.argv if w not in ("--root", ".demo/fleet"))
    at = [i for i, step in enumerate(NIGHT) if words == step or words.startswith(step + " ")]
    return max(at, key=lambda i: len(NIGHT[i])) if at else len(NIGHT)


def in_night_order(examples: list[Example]) -> list[Example]:
    """Each line once, where the night first shows it (`gateway up`'s page shows `gateway down`; the
    `view` group's page, its verbs' lines)."""
    seen: dict[str, Example] = {}
    for example in sorted(examples, key=night_key):
        seen.setdefault(example.line, example)
    return list(seen.values())


DEMO_EXAMPLES = in_night_order([e for e in all_examples() if not e.real_fleet])


class Checkout:
    """The scratch folder a newcomer works in: `.demo/` from `sparkfleet demo`, sparkfleet on PATH."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARKFLEET_", "XDG_"))}
        self.env.update(
            PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", HOME=str(where), TERM="dumb", NO_COLOR="1",
            SPARKFLEET_ROOT=str(where / ".demo" / "fleet"),
        )  # fmt: skip

    def bash(self, line: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-c", line], cwd=self.where, env=self.env, capture_output=True, text=True,
            timeout=timeout, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def lane_running(self) -> bool:
        return self.bash(f"sparkfleet status {DEMO_LANE}").returncode == 0

    def lane(self, up: bool) -> None:
        if up and not self.lane_running():
            done = self.bash(f"sparkfleet launch {DEMO_LANE} --replace")
            assert done.returncode == 0, done.stdout + done.stderr
        elif not up:
            done = self.bash(f"sparkfleet stop {DEMO_LANE}")
            assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    where = tmp_path_factory.mktemp("checkout")
    co = Checkout(where)
    made = co.bash("sparkfleet demo --workdir .demo")
    assert made.returncode == 0, made.stdout + made.stderr
    try:
        yield co
    finally:  # what the examples started, whatever failed: the gateway (its recorded PID) and the lane
        co.bash("sparkfleet gateway down")
        co.bash(f"sparkfleet stop {DEMO_LANE}")


def _ctrl_c(co: Checkout, example: Example) -> tuple[int, str]:
    proc = subprocess.Popen(
        ["bash", "-c", f"exec {example.line}"], cwd=co.where, env=co.env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    time.sleep(6)
    proc.send_signal(signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"`{example}` did not end within 60 s of Ctrl-C:\n{out}")
    return proc.returncode, out


@pytest.mark.parametrize(
    "example",
    DEMO_EXAMPLES,
    ids=str,
)
def test_help_example_runs_on_the_demo(checkout, example):
    if verb_of(example) in LANE_DOWN | LANE_UP:
        checkout.lane(up=verb_of(example) in LANE_UP)
    if example.until_ctrl_c:
        code, out = _ctrl_c(checkout, example)
        assert "Traceback" not in out, out
        assert code in (0, 130), (code, out)
        return
    done = checkout.bash(example.line)
    out = done.stdout + done.stderr
    assert "Traceback" not in out, out
    if verb_of(example) == "report" and done.returncode == 1:  # its help: exit 1 (shortfall) on a regression
        assert "regression" in done.stdout.lower(), out
    else:
        assert done.returncode == 0, f"`{example}` exited {done.returncode}:\n{out}"
    if "--json" in example.argv:
        json.loads(done.stdout)
