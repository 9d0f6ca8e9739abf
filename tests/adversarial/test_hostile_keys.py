"""`keys add` and `keys revoke` against a careless operator, a planted file, a race and `kill -9`,
through the real nginx front and smg over a real demo lane (tests/support/localgateway.py).

The oracle for a revoke: at every moment, a user either is listed by `keys list` (so a rerun of
`keys revoke` finishes the job) or gets 401 at the gateway; a revoke returns only once the 401 is
confirmed. For `keys add`: a run that fails makes no key (a rerun works), and of two runs for one
user exactly one gets a key, which works.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading

import pytest
from click.testing import CliRunner

from sparkfleet.base.errors import ExitCode, SparkfleetError
from sparkfleet.cli import main as cli
from sparkfleet.serving import gateway, users

from .tally import bad_input, count

try:
    from support.localgateway import chat_body, local_gateway, request
except ImportError:  # tests/ imported as a package
    from tests.support.localgateway import chat_body, local_gateway, request

pytestmark = [pytest.mark.timeout(600), pytest.mark.xdist_group("local_lanes")]


@pytest.fixture
def gw(tmp_path):
    yield from local_gateway(tmp_path)


def keys(gw, *args: str):
    return CliRunner(env={"SPARKFLEET_GATEWAY_STATE": str(gw.state)}).invoke(cli, ["keys", *args])


def status_of(gw, key: str) -> int | None:
    return request(f"{gw.url}/v1/chat/completions", key, "POST", chat_body()).status


def listed(gw) -> dict[str, bool]:
    res = keys(gw, "list", "--json")
    assert res.exit_code == 0, res.output
    return {u["user"]: u.get("revoking", False) for u in json.loads(res.stdout)}


def add(gw, user: str) -> str:
    res = keys(gw, "add", user, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["key"]


@pytest.mark.surface("cli:keys revoke", "file:gateway users/USER.key")
def test_one_world_readable_key_file_blocks_nobody_and_revoke_waits_for_the_401(gw, figures):
    alice, bob = add(gw, "alice"), add(gw, "bob")
    assert status_of(gw, alice) == 200 and status_of(gw, bob) == 200
    (gw.state / "users" / "bob.key").chmod(0o644)  # the operator's slip: others can read bob's key

    res = keys(gw, "revoke", "alice")
    assert res.exit_code == 0 and "refuses it now" in res.output, res.output
    assert [status_of(gw, alice) for _ in range(10)] == [401] * 10
    assert "bob is refused at the gateway" in res.output and "not a 0600 regular file" in res.output
    refused = status_of(gw, bob) == 401  # a key others could read is left out of the front's map
    bad_input(figures, "file:gateway users/USER.key", refused)
    assert refused
    assert "Traceback" not in res.output

    res = keys(gw, "revoke", "bob")  # the hint's own fix works
    assert res.exit_code == 0, res.output
    assert status_of(gw, bob) == 401 and listed(gw) == {}
    res = keys(gw, "revoke", "bob", "--json")
    assert res.exit_code == ExitCode.USAGE
    assert json.loads(res.stdout)["error"].startswith("user bob has no key")
    assert status_of(gw, gw.key) == 200  # the operator's inference key is untouched


MUTATIONS = ("replace", "rename", "unlink", "link", "kill")  # every os call that changes a file or signals


def _revoke_killed_at(state, user: str, k: int) -> bool:
    """Run revoke in a forked child that SIGKILLs itself at its k-th file change or signal (before it
    happens, like a power cut of the process); True if it was killed, False if it finished first."""
    pid = os.fork()
    if pid == 0:  # the child: no finally blocks, no atexit past this point
        real = {name: getattr(os, name) for name in MUTATIONS}
        seen = [0]

        def hooked(name):
            def call(*args, **kwargs):
                seen[0] += 1
                if seen[0] == k:
                    real["kill"](os.getpid(), signal.SIGKILL)
                return real[name](*args, **kwargs)

            return call

        for name in MUTATIONS:
            setattr(os, name, hooked(name))
        try:
            gateway.revoke_user(state, user)
            code = 0
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return True
    assert os.WEXITSTATUS(status) == 0, f"revoke failed at point {k} without a kill"
    return False


@pytest.mark.surface("cli:keys revoke")
def test_kill9_at_every_step_of_revoke_leaves_the_user_listed_or_refused_and_a_rerun_converges(gw, figures):
    k = 0
    while True:
        k += 1
        key = add(gw, "alice")
        killed = _revoke_killed_at(gw.state, "alice", k)
        if killed:
            count(figures, "cli:keys revoke", "faults_injected")
        # the invariant, right after the kill: listed (a rerun finishes), or refused already
        still = "alice" in listed(gw)
        code = status_of(gw, key)
        assert still or code == 401, f"killed at step {k}: alice unlisted and her key gets {code}"
        if still:
            res = keys(gw, "revoke", "alice")
            assert res.exit_code == 0 and "refuses it now" in res.output, (k, res.output)
        assert status_of(gw, key) == 401 and "alice" not in listed(gw), k
        if not killed:
            break
    assert k >= 4, k  # the rename, the map's rewrite, the SIGHUP and the removal were all hit
    assert status_of(gw, gw.key) == 200


@pytest.mark.surface("cli:keys add --out")
def test_keys_add_out_to_a_path_it_cannot_write_makes_no_key_and_a_rerun_works(gw, tmp_path, figures):
    (tmp_path / "a-file").write_text("x")
    for bad in ("/proc/1/nope.key", str(tmp_path / "a-file" / "zed.key")):  # unwritable; under a file
        res = keys(gw, "add", "zed", "--out", bad)
        clean = res.exit_code == ExitCode.USAGE and isinstance(res.exception, SystemExit)
        bad_input(figures, "cli:keys add --out", clean and "zed" not in listed(gw))
        assert clean and f"--out {bad}" in res.output and "no key was made" in res.output, res.output
        assert "Traceback" not in res.output and "zed" not in listed(gw)
    out = tmp_path / "keys" / "zed.key"
    res = keys(gw, "add", "zed", "--out", str(out))  # the rerun, to a writable path
    assert res.exit_code == 0, res.output
    key = out.read_text().strip()
    assert key not in res.output and out.stat().st_mode & 0o777 == 0o600
    assert status_of(gw, key) == 200


@pytest.mark.surface("cli:keys add")
def test_two_keys_add_of_one_user_at_once_one_wins_and_its_key_works(gw, monkeypatch):
    """Both runs are held between "no key yet" and "make the key" until both got there (or 3 s
    passed, when one of them waits for the other's lock): exactly one gets a key, which works."""
    made = threading.Barrier(2, timeout=3)
    real = users.new_key

    def held_new_key() -> str:
        with contextlib.suppress(threading.BrokenBarrierError):
            made.wait()
        return real()

    monkeypatch.setattr(users, "new_key", held_new_key)
    results: list[object] = [None, None]

    def one(i: int) -> None:
        try:
            results[i] = gateway.add_user(gw.state, "dup")[0]
        except SparkfleetError as exc:
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    won = [r for r in results if isinstance(r, str)]
    lost = [r for r in results if isinstance(r, SparkfleetError)]
    assert len(won) == 1 and len(lost) == 1, results
    assert "already has a key" in lost[0].message and lost[0].exit_code == ExitCode.REFUSED
    assert status_of(gw, won[0]) == 200

    # and several users at once: every key works (no run overwrites another's map)
    monkeypatch.setattr(users, "new_key", real)
    env = {**os.environ, "SPARKFLEET_GATEWAY_STATE": str(gw.state)}
    argv = [sys.executable, "-m", "sparkfleet", "keys", "add"]
    procs = [subprocess.Popen([*argv, f"u{i}", "--json"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(4)]  # fmt: skip
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [o[1][-300:] for o in outs]
    assert all(status_of(gw, json.loads(o[0])["key"]) == 200 for o in outs)
