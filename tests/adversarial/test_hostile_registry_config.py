"""The registry's two configs as a hand edit or a stray file may leave them: `registry serve` refuses.

`registry init` writes `config.yml` (pulls: anonymous, read-only, at the address given) and
`push.yml` (pushes: behind the login) into the head host's state dir; `registry serve` runs one
docker-registry for each. A config is outside input once written: an operator may edit it, a
backup may restore an old one. Each case is bad by the test's own making, against what
docs/images.md promises (pulls never take a write, pushes always need the login, the registry
listens on the address given and never on every interface): the read-only block taken out, the
login taken out, addr 0.0.0.0 or a JSON string that is not one, no addr, bytes that are no text, a
directory, no file. The oracle: `registry serve` exits non-zero naming the file, with no
traceback, and no docker-registry was started (SPARKFLEET_REGISTRY_BIN is a script that leaves a
marker when run).
"""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkfleet.cli import main as cli
from sparkfleet.images.registry_host import PULL_CONFIG, PUSH_CONFIG, READ_ONLY, init

from .tally import bad_input

pytestmark = pytest.mark.slow


def _addr(line: str):
    """The config with its `  addr: ...` line replaced by `line` ("" removes it)."""
    return lambda text: re.sub(r'(?m)^  addr: ".*"$\n', lambda _m: line and line + "\n", text)


CASES = {
    "pull-not-read-only": (PULL_CONFIG, lambda t: t.replace(READ_ONLY, "")),
    "push-without-the-login": (PUSH_CONFIG, lambda t: re.sub(r"\n  htpasswd:\n(    .*\n)+", "\n", t)),
    "addr-every-interface": (PULL_CONFIG, _addr('  addr: "0.0.0.0:5999"')),
    "addr-bad-escape": (PULL_CONFIG, _addr(r'  addr: "\q"')),
    "addr-no-port": (PUSH_CONFIG, _addr('  addr: "127.0.0.1"')),
    "no-addr": (PULL_CONFIG, _addr("")),
    "not-text": (PUSH_CONFIG, lambda t: b"\xff\xfe" + t.encode()),
    "a-directory": (PULL_CONFIG, None),
    "missing": (PUSH_CONFIG, None),
}


@pytest.fixture
def operator(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """`registry init`'s files, and a stand-in docker-registry that leaves a marker and exits."""
    state, marker = tmp_path / "operator", tmp_path / "registry-ran"
    fake = tmp_path / "docker-registry"
    fake.write_text(f"#!/bin/sh\ntouch {marker}\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(state))
    monkeypatch.setenv("SPARKFLEET_REGISTRY_BIN", str(fake))
    init(state, "127.0.0.1:5999", tmp_path / "storage")
    return state, marker


@pytest.mark.surface("file:registry config", "cli:registry serve")
@pytest.mark.parametrize("case", sorted(CASES))
def test_registry_serve_refuses_a_config_init_would_not_write(operator, figures, case):
    state, marker = operator
    name, change = CASES[case]
    path = state / "registry" / name
    if change is None:
        path.unlink()
        if case == "a-directory":
            path.mkdir()
    else:
        new = change(path.read_text())
        assert new != path.read_text(), f"{case}: the mutation changed nothing"
        (path.write_bytes if isinstance(new, bytes) else path.write_text)(new)
    res = CliRunner().invoke(cli, ["registry", "serve", "--json"])
    traceback = res.exception is not None and not isinstance(res.exception, SystemExit)
    refused = res.exit_code not in (0, None) and str(path) in res.output and not traceback
    bad_input(figures, "registry-config", refused=refused and not marker.exists())
    assert refused, (res.exit_code, res.output, res.exception)
    assert not marker.exists(), "docker-registry was started on a config init would not write"


def test_the_configs_init_writes_are_served(operator):
    """The control: untouched, both listeners are started (the stand-in exits, so serve ends)."""
    _, marker = operator
    res = CliRunner().invoke(cli, ["registry", "serve", "--json"])
    assert marker.exists() and res.exit_code == 1 and "the registry stopped" in res.output, res.output
