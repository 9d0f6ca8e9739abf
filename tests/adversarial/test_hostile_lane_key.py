"""A lane's API key file on a node, as someone else may have left it: every reader refuses it cleanly.

`<state_dir>/keys/<lane>.key` is read by the node agent (`api-key`, and every action that probes
the lane with its key), by a controller on its own host, and by the fleet view for the gateway's
key. Whoever can write the state dir can leave anything there. Each case below is bad by the
test's own making: a mode others can read, a link, a directory, a FIFO, bytes that are no text,
an empty file, a key with a space or a line break in it, a megabyte of key. The oracle: the reader
raises SparkfleetError naming the file (a FIFO must not hang it), the agent answers `ok: false`
without a traceback, and the key never appears in the message.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from sparkfleet.base.errors import SparkfleetError
from sparkfleet.facts import apikeys

from .tally import bad_input
from .test_hostile_agent import run_agent

LANE = "lane-k"
GOOD = apikeys.new_key()


def _plant(keys: Path, case: str) -> None:
    path = keys / f"{LANE}.key"
    elsewhere = keys.parent / "elsewhere.key"
    if case == "mode-0644":
        path.write_text(GOOD + "\n")
        path.chmod(0o644)
    elif case == "link-to-a-0600-key":
        elsewhere.write_text(GOOD + "\n")
        elsewhere.chmod(0o600)
        path.symlink_to(elsewhere)
    elif case == "directory":
        path.mkdir(mode=0o700)
    elif case == "fifo":
        os.mkfifo(path, 0o600)
    else:
        data = {
            "not-text": b"\xff\xfe" + GOOD.encode(),
            "empty": b"",
            "a-space": f"{GOOD} x\n".encode(),
            "a-line-break": f"{GOOD}\nX-Injected: 1\n".encode(),
            "a-megabyte": b"k" * (1 << 20),
        }[case]
        path.write_bytes(data)
        path.chmod(0o600)


CASES = ["mode-0644", "link-to-a-0600-key", "directory", "fifo", "not-text", "empty", "a-space",
         "a-line-break", "a-megabyte"]  # fmt: skip


@pytest.fixture
def state(tmp_path) -> Path:
    (tmp_path / "state" / apikeys.KEYS_DIR).mkdir(parents=True, mode=0o700)
    return tmp_path / "state"


def _no_hang(seconds: int = 10):
    def expire(signum, frame):
        raise TimeoutError("the reader hung on the key file")

    signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)


@pytest.mark.surface("file:lane API key")
@pytest.mark.parametrize("case", CASES)
def test_a_hostile_key_file_is_refused_naming_it(state, figures, case):
    _plant(state / apikeys.KEYS_DIR, case)
    _no_hang()
    try:
        apikeys.read_key(state, LANE)
        refused, why = False, "accepted"
    except SparkfleetError as exc:
        refused, why = str(apikeys.key_path(state, LANE)) in exc.message, exc.message
    finally:
        signal.alarm(0)
    bad_input(figures, "lane-key-file", refused=refused)
    assert refused, why
    assert GOOD not in why


@pytest.mark.surface("file:lane API key", "agent:api-key")
@pytest.mark.parametrize("case", CASES)
def test_the_agent_answers_a_hostile_key_file_as_an_error(state, figures, case, monkeypatch, capsys):
    _plant(state / apikeys.KEYS_DIR, case)
    _no_hang()
    try:
        code, answer, err = run_agent("api-key", json.dumps({"state_dir": str(state), "lane": LANE}),
                                      monkeypatch, capsys)  # fmt: skip
    finally:
        signal.alarm(0)
    named = str(apikeys.key_path(state, LANE))
    clean = code == 0 and answer is not None and answer["ok"] is False and "Traceback" not in err
    bad_input(figures, "lane-key-file", refused=clean and named in answer["error"])
    assert clean, (code, answer, err[-2000:])
    assert named in answer["error"], answer
    assert GOOD not in json.dumps(answer)
