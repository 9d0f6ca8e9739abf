"""The gateway's record as someone with write access to its state dir may leave it.

`gateway up` (and the unit's `gateway run`) records the process it started in
`<state>/gateway.record.json`; `gateway status`, `gateway down`, `keys add|revoke` and the fleet
view read it, and `down` signals the PID it names. Each case is bad by the test's own making:
a record that is no JSON, no text, a list, a directory, one with fields of the wrong type, and one
naming a live process of this test's own that is not a gateway (its real PID, start time and boot
id, as a restored backup or an edit could). The oracle: the readers refuse or say "not running"
without a traceback, and the impostor is never signalled.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkfleet.base import procs
from sparkfleet.cli import main as cli

from .tally import bad_input

RECORD = "gateway.record.json"


def _record(**changed) -> dict:
    doc = {"pid": 999999, "start_ticks": 1, "boot_id": procs.boot_id(), "bind": "127.0.0.1",
           "port": 18080, "policy": "round_robin", "workers": [], "log": "/dev/null",
           "started_at": 0.0, "router_port": 18081}  # fmt: skip
    return {**doc, **changed}


BROKEN = {
    "not-json": b"{ not json",
    "not-text": b"\xff\xfe{}",
    "a-list": b"[1, 2]",
    "missing-fields": json.dumps({"pid": 1}).encode(),
    "pid-a-string": json.dumps(_record(pid="1")).encode(),
    "pid-true": json.dumps(_record(pid=True)).encode(),
    "pid-negative": json.dumps(_record(pid=-1)).encode(),
    "port-a-list": json.dumps(_record(port=[80])).encode(),
    "deep": b"[" * 100_000 + b"]" * 100_000,
}


def _gateway(state: Path, *argv: str):
    return CliRunner(env={"SPARKFLEET_GATEWAY_STATE": str(state)}).invoke(cli, ["gateway", *argv, "--json"])


@pytest.mark.surface("file:gateway state", "cli:gateway status", "cli:gateway down")
@pytest.mark.parametrize("case", [*sorted(BROKEN), "a-directory"])
def test_a_broken_record_is_refused_naming_it(tmp_path, figures, case):
    state = tmp_path / "gw"
    state.mkdir(mode=0o700)
    if case == "a-directory":
        (state / RECORD).mkdir()
    else:
        (state / RECORD).write_bytes(BROKEN[case])
    for verb in ("status", "down"):
        res = _gateway(state, verb)
        traceback = res.exception is not None and not isinstance(res.exception, SystemExit)
        refused = res.exit_code not in (0, None) and RECORD in res.output and not traceback
        bad_input(figures, "gateway-record", refused=refused)
        assert refused, (verb, res.exit_code, res.output[-1500:], res.exception)


@pytest.mark.surface("file:gateway state", "cli:gateway down", "cli:gateway status")
def test_a_record_naming_a_live_process_that_is_no_gateway_never_signals_it(tmp_path, figures):
    state = tmp_path / "gw"
    state.mkdir(mode=0o700)
    impostor = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)
    try:
        time.sleep(0.2)
        ticks = procs.start_ticks(impostor.pid)
        (state / RECORD).write_text(json.dumps(_record(pid=impostor.pid, start_ticks=ticks)))
        down = _gateway(state, "down")
        status = _gateway(state, "status")
        alive = impostor.poll() is None
        bad_input(figures, "gateway-record", refused=alive)
        assert alive, f"gateway down signalled a process that is no gateway: {down.output}"
        assert down.exit_code == 0 and json.loads(down.output) == {"stopped": False}, down.output
        assert json.loads(status.output)["running"] is False, status.output
    finally:
        impostor.kill()
        impostor.wait()
