"""The controller's one client to the node agent: run an agent action on a host, get its JSON answer.

Launch, images, doctor, bench's target, the supervisor, keys and the gateway all talk to nodes
through the same agent protocol: one JSON request on stdin, one JSON answer on stdout,
`{"ok": false, "error", "hint"}` for a refusal. The client knows hosts and the inventory,
nothing of a lane's lifecycle or an image's loading.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..base.errors import SparkfleetError
from ..base.selfexec import module_argv
from ..fleet.inventory import state_dir_of
from .hosts import LocalHost, check_reachable, remote_sparkfleet

if TYPE_CHECKING:
    from ..fleet.inventory import Inventory


class AgentError(SparkfleetError):
    """The node-side agent refused or failed."""


def agent_argv(runner) -> list[str]:
    """The agent command on a node: this interpreter locally, else `<$SPARKFLEET_REMOTE> agent`."""
    if isinstance(runner, LocalHost):
        return module_argv("sparkfleet.node.agent")
    return [*remote_sparkfleet(), "agent"]


def call_agent(runner, action: str, request: dict, timeout: float = 120) -> dict:
    """Run one agent action on a node and return its JSON answer (raising on ssh or agent errors)."""
    res = check_reachable(
        runner.run([*agent_argv(runner), action], input=json.dumps(request), timeout=timeout)
    )
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict) and res.returncode == 127:  # the remote shell found no such command
        raise AgentError(
            f"{runner.name}: sparkfleet is not installed there ({agent_argv(runner)[0]}: command not found)",
            hint=f"deploy it first: `sparkfleet bootstrap {runner.name}` once, then `deploy .#{runner.name}` "
            "(or set SPARKFLEET_REMOTE to how sparkfleet starts on the hosts)",
        )
    if not isinstance(answer, dict):
        err = (res.stderr.strip().splitlines() or ["no output"])[-1]
        if "Traceback" in res.stderr:
            raise AgentError(
                f"{runner.name}: sparkfleet agent {action} crashed: {err}",
                hint="a sparkfleet bug, or different sparkfleet versions on controller and node",
            )
        raise AgentError(
            f"{runner.name}: sparkfleet agent {action} failed (exit {res.returncode}): {err}",
            hint="is sparkfleet installed on the node? $SPARKFLEET_REMOTE names the remote command",
        )
    if not answer.get("ok"):
        raise AgentError(
            f"{runner.name}: {answer.get('error')}",
            hint=answer.get("hint"),
            exit_code=answer.get("exit_code"),
        )
    return answer


def state_request(inv: Inventory, lane: str, host: str, **extra: Any) -> dict:
    """An agent request about `lane` on `host`: the lane and where its records live there, plus `extra`."""
    return {"lane": lane, "state_dir": str(state_dir_of(inv.host(host))), **extra}
