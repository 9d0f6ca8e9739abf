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

import io
import json
import os
import sys

import pytest

from sparkfleet.node import agent

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
