"""A fleet where a `sparkfleet` verb can run but can reach, launch or destroy nothing: for hostile CLI input.

A copy of the repository's real fleet.toml and recipes (the inventory an operator has), with every
host's address moved to `<name>.invalid` (RFC 2606: never resolves), its hubs and state under the
test's own directory, and an ssh_config whose every host's ProxyCommand is `false`: whatever a verb
does with a value it wrongly accepted, no connection leaves this machine. HOME, the XDG and
sparkfleet state dirs and the working directory are the test's too.

`run(argv)` runs the real click tree in-process (click's CliRunner) with a deadline (SIGALRM): a
verb that loops on an accepted value (`watch --interval nan`) ends as `timed_out`, not a hang.
"""

from __future__ import annotations

import math
import re
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkfleet.cli import main
from sparkfleet.fleet import inventory

REPO = Path(__file__).resolve().parents[2]
LANE = "dsv41-flash-exl3-2x"  # two hosts, a kit, a display card, a cache seed: the richest recipe
ENGRAM_LANE = "dsv41-flash-4x-aiden"  # a lane with an [engram] table
HOST = "dgx1"
SSH_CONFIG = "Host *\n  ProxyCommand /bin/false\n  BatchMode yes\n  ConnectTimeout 2\n"


@dataclass(frozen=True)
class Outcome:
    code: int | None  # the exit code (None: no exit, it ran past the deadline)
    output: str  # stdout and stderr together
    traceback: str | None  # an exception that escaped the verb (not SparkfleetError / usage)
    timed_out: bool

    def names(self, *words: str) -> bool:
        return any(w and w in self.output for w in words)


class Deadline(BaseException):
    """Raised by SIGALRM inside the verb: a BaseException, so no `except Exception` swallows it."""


@dataclass
class Sandbox:
    root: Path  # the fleet root (SPARKFLEET_ROOT)
    home: Path
    env: dict[str, str]

    @property
    def lanes(self) -> set[str]:
        return {p.name for p in (self.root / "recipes").iterdir() if (p / "recipe.toml").exists()}

    def run(self, argv: list[str], deadline_s: float = 20.0, stdin: str | None = None) -> Outcome:
        def expire(signum, frame):
            raise Deadline

        old = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, deadline_s)
        try:
            res = CliRunner().invoke(main, argv, env=self.env, input=stdin, catch_exceptions=True)
        except Deadline:
            return Outcome(None, "", None, True)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        if isinstance(res.exception, Deadline):
            return Outcome(None, res.output, None, True)
        escaped = res.exception if res.exception and not isinstance(res.exception, SystemExit) else None
        trace = None
        if escaped is not None:
            import traceback

            trace = "".join(traceback.format_exception(escaped))
        return Outcome(res.exit_code, res.output, trace, False)


def make(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    root, home, state = tmp / "fleet", tmp / "home", tmp / "state"
    skip = shutil.ignore_patterns("generations", "reports", "incidents")
    shutil.copytree(REPO / "recipes", root / "recipes", ignore=skip)
    (root / "hosts").mkdir(parents=True)
    text = (REPO / "hosts" / "fleet.toml").read_text()
    text = re.sub(r'^(address\s*=\s*)"([^"]+)"', r'\1"\2.invalid"', text, flags=re.M)
    text = re.sub(r'^(local_hub\s*=\s*)"[^"]*"', rf'\1"{tmp}/node/hf-local/hub"', text, flags=re.M)
    text = re.sub(r'^(nas_hub\s*=\s*)"[^"]*"', rf'\1"{tmp}/nas/huggingface/hub"', text, flags=re.M)
    text = re.sub(r'^(state_dir\s*=\s*)"[^"]*"', rf'\1"{tmp}/host-state"', text, flags=re.M)
    text = re.sub(r"^(mac|wol_broadcast)\s*=.*$", "", text, flags=re.M)  # no Wake-on-LAN packet leaves
    (root / "hosts" / "fleet.toml").write_text(text)
    home.mkdir()
    (home / "ssh_config").write_text(SSH_CONFIG)
    inv = inventory.load(root)
    assert all(h.address.endswith(".invalid") for h in inv.hosts.values()), "a host would be reachable"
    env = {
        "SPARKFLEET_ROOT": str(root),
        "HOME": str(home),
        "XDG_STATE_HOME": str(state),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "SPARKFLEET_STATE_DIR": str(state / "sparkfleet"),
        "SPARKFLEET_GATEWAY_STATE": str(state / "gateway"),
        "SPARKFLEET_SSH_CONFIG": str(home / "ssh_config"),
        "NO_COLOR": "1",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(tmp)
    return Sandbox(root, home, env)


def spelled(value: str) -> tuple[str, ...]:
    """How a refusal may quote `value`: as given, or as the number click parsed it to."""
    out = [value]
    try:
        f = float(value)
        out += [repr(f), str(f)] if not math.isnan(f) else ["nan"]
    except ValueError:
        pass
    return tuple(out)
