"""A retired rank record's stop note (`<state_dir>/lanes/<lane>/last/rank<r>.json`, "stopped") is a
file on the node that `status` reads and prints: whatever stands there, status answers, says only
what it can read, and prints no control character from it."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from sparkfleet.node import agent, records
from sparkfleet.node.protocol import StatusRequest

from .tally import bad_input

SURFACE = "status-stop-note"
ESC = "\x1b]0;pwned\x07\x1b[2J"
RECORD = records.LaunchRecord("demo", "dgx1", 0, "process", "sf-demo-r0", "/x/rank0.log", 1.5e9, pid=4242)

HOSTILE = [
    "not a dict",
    ["a", "list"],
    {"at": "yesterday", "by": "me", "detail": "x"},
    {"at": math.nan, "by": "me", "detail": "x"},
    {"at": 1e300, "by": "me", "detail": "x"},
    {"at": -5, "by": "me", "detail": "x"},
    {"at": 1.7e9, "by": {"nested": [1, 2]}, "detail": "x"},
    {"at": 1.7e9},
    None,
]


def _write(state_dir, note) -> None:
    doc = dataclasses.asdict(RECORD) | {"stopped": note}
    path = records.last_run_path(state_dir, "demo", 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, allow_nan=True))


@pytest.mark.surface("file:launch record", "agent:status")
@pytest.mark.parametrize("note", HOSTILE, ids=range(len(HOSTILE)))
def test_an_unreadable_stop_note_says_nothing_and_never_breaks_status(tmp_path, note, figures):
    _write(tmp_path, note)
    answer = agent.status(StatusRequest("demo", str(tmp_path)))
    [last] = answer["last"]
    bad_input(figures, SURFACE, refused=last["stopped"] is None)
    assert last["stopped"] is None and last["record"]["name"] == "sf-demo-r0"
    json.dumps(answer, allow_nan=False)  # what goes back to the controller is plain JSON


@pytest.mark.surface("file:launch record")
def test_control_characters_in_a_stop_note_never_reach_the_terminal(tmp_path, figures):
    _write(tmp_path, {"at": 1.7e9, "by": f"sparkfleet stop {ESC}(root@x)", "detail": f"stopped{ESC}"})
    [last] = agent.status(StatusRequest("demo", str(tmp_path)))["last"]
    note = last["stopped"]
    bad_input(figures, SURFACE, refused="\x1b" not in note["by"] + note["detail"])
    assert (note["by"], note["detail"], note["at"]) == ("sparkfleet stop (root@x)", "stopped", 1.7e9)
