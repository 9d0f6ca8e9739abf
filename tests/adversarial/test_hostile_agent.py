"""Every node agent action, given a request no controller would send, answers a clean refusal.

`sparkfleet agent ACTION` reads one JSON request on stdin (the controller sends it over ssh). A
node may run another sparkfleet version than the controller, and the request names paths the
agent builds file names from (`state_dir`, `lane`): a request that is not JSON, not an object,
names a lane that is a path (`../../escape`), a state dir that is not an absolute path, or
carries fields of the wrong type must get `{"ok": false, "error": ...}` on stdout, exit 0 (the
agent's way: ssh's own 255 stays meaningful), no traceback, and write nothing anywhere. Each
action in `ACTIONS` gets every case, so a new action is attacked without anyone writing it here.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import sys
import types
import typing

import pytest

from sparkfleet.node import agent
from sparkfleet.node.protocol import REQUESTS

from .tally import bad_input

ESCAPE = "../../escape"
# (case, the request on stdin; {state} is the test's state dir) — each is bad for any action
BAD_REQUESTS = {
    "not-json": "{ this is not json",
    "not-utf8-json": b"\xff\xfe{}".decode("latin-1"),
    "a-list": "[]",
    "a-string": '"status"',
    "a-number": "42",
    "lane-is-a-path": json.dumps(
        {"state_dir": "{state}", "lane": ESCAPE, "rank": 0, "key": "sk-" + "a" * 40}
    ),
    "lane-not-a-string": json.dumps({"state_dir": "{state}", "lane": ["x"], "rank": 0}),
    "state-dir-relative": json.dumps({"state_dir": "state", "lane": "lane-a", "rank": 0}),
    "state-dir-climbs": json.dumps({"state_dir": "{state}/../..", "lane": "lane-a", "rank": 0}),
    "state-dir-not-a-string": json.dumps({"state_dir": 42, "lane": "lane-a", "rank": 0}),
    "rank-not-a-number": json.dumps({"state_dir": "{state}", "lane": "lane-a", "rank": "0; id"}),
}


def run_agent(action: str, stdin: str, monkeypatch, capsys) -> tuple[int, dict | None, str]:
    """The agent as the node runs it: argv, stdin, one line on stdout."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    try:
        code = agent.main([action])
    except SystemExit as exc:  # pragma: no cover - main returns its code
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    lines = [ln for ln in out.splitlines() if ln.strip()]
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    return code, answer if isinstance(answer, dict) else None, err


def _tree(root) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}


@pytest.mark.parametrize(
    "action,case",
    [
        pytest.param(a, c, id=f"{a}:{c}", marks=pytest.mark.surface(f"agent:{a}"))
        for a in sorted(agent.ACTIONS)
        for c in BAD_REQUESTS
    ],
)
def test_a_malformed_request_is_answered_not_a_traceback(
    tmp_path, monkeypatch, capsys, figures, action, case
):
    """The raised error can only be a traceback or an answer; only the answer is right."""
    top = tmp_path / "a" / "b"  # `../../escape` from state/keys lands in tmp_path/a
    state = top / "state"
    state.mkdir(parents=True)
    before = _tree(tmp_path)
    monkeypatch.chdir(top)
    try:
        code, answer, err = run_agent(
            action, BAD_REQUESTS[case].replace("{state}", str(state)), monkeypatch, capsys
        )
        crashed = None
    except Exception as exc:  # noqa: BLE001 - what escapes main() is what a node prints as a traceback
        code, answer, err, crashed = 1, None, "", exc
    written = _tree(tmp_path) - before
    ok = crashed is None and code == 0 and answer is not None and answer.get("ok") is False and not written
    bad_input(figures, "agent-requests", refused=ok)
    assert crashed is None, f"agent {action} crashed on {case}: {crashed!r}"
    assert code == 0 and answer is not None, (code, err)
    assert answer["ok"] is False and answer.get("error"), answer
    assert not written, f"agent {action} wrote {written} for a request it should have refused"


def test_a_good_request_still_gets_its_answer(tmp_path, monkeypatch, capsys):
    """The checks refuse only what is bad: a well-formed status request for a lane with no ranks
    (and no stopped run: `last`, how the lane's last run ended, is empty)."""
    code, answer, _ = run_agent(
        "status", json.dumps({"state_dir": str(tmp_path), "lane": "lane-a"}), monkeypatch, capsys
    )
    assert code == 0 and answer == {"ok": True, "ranks": [], "last": []}


# ---- a field of the wrong JSON type, in every action's request ---------------------------------------

WRONG = {str: 5, int: "5; id", float: "soon", bool: "yes", list: "all", dict: [1]}  # per wanted type


def _wanted(hint) -> type:
    """The JSON type a record field's annotation wants (Optional[X] wants X; list[X] wants a list)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return _wanted(args[0])
    return typing.get_origin(hint) or hint


def _valid(cls, state: str) -> dict:
    """A request of `cls` with every required field given a value of its type (lane and state_dir
    the checked names they must be), nested records built the same way."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        want = _wanted(typing.get_type_hints(cls)[f.name])
        special = {"lane": "lane-a", "state_dir": state}
        if f.name in special:
            out[f.name] = special[f.name]
        elif dataclasses.is_dataclass(want):
            out[f.name] = _valid(want, state)
        else:
            out[f.name] = {str: "x", int: 0, float: 1.0, bool: False, list: [], dict: {}}[want]
    return out


MISTYPED = [
    (action, f.name)
    for action, cls in REQUESTS.items()
    for f in dataclasses.fields(cls)
    if f.name not in ("lane", "state_dir", "rank")  # read_request's own checks (BAD_REQUESTS above)
]


@pytest.mark.parametrize(
    "action,name",
    [pytest.param(a, n, id=f"{a}:{n}", marks=pytest.mark.surface(f"agent:{a}")) for a, n in MISTYPED],
)
def test_a_field_of_the_wrong_type_is_refused_by_name_before_the_action_runs(
    tmp_path, monkeypatch, capsys, figures, action, name
):
    """Every other field well formed, this one of another JSON type (a node and a controller of
    different sparkfleet versions, or a hand-written request): refused naming the field, as a bad
    request (exit_code 2), never a crash deep inside the action, and nothing written."""
    state = tmp_path / "state"
    state.mkdir()
    cls = REQUESTS[action]
    request = _valid(cls, str(state))
    want = _wanted(typing.get_type_hints(cls)[name])
    request[name] = 7 if dataclasses.is_dataclass(want) else WRONG[want]
    before = _tree(tmp_path)
    code, answer, err = run_agent(action, json.dumps(request), monkeypatch, capsys)
    refused = (
        code == 0 and answer is not None and answer["ok"] is False and answer.get("exit_code") == 2
        and f"request's {name} is" in answer["error"] and _tree(tmp_path) == before
    )  # fmt: skip
    bad_input(figures, "agent-requests", refused=refused)
    assert refused, (answer, err)
