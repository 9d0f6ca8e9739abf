"""The controller's one client to the node agent: run an agent action on a host, get its JSON answer.

Launch, images, doctor, bench's target, the supervisor, keys and the gateway all talk to nodes
through the same agent protocol: each action's request a record (`sparkfleet.node.protocol`,
encoded by `wire`), one JSON request on stdin, one JSON answer on stdout, `{"ok": false, "error",
"hint"}` for a refusal. The client knows hosts and the inventory, nothing of a lane's lifecycle or
an image's loading.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..base.errors import SparkfleetError
from ..base.selfexec import module_argv
from ..fleet.inventory import state_dir_of
from .hosts import LocalHost, check_reachable, connect, remote_sparkfleet
from .wire import ErrorKind, LaneRequest, Request, error_kind

if TYPE_CHECKING:
    from ..fleet.inventory import Inventory

# How a controller module calls an agent: `call_agent`, or what a test or the gateway hands in.
Call = Callable[..., dict]
L = TypeVar("L", bound=LaneRequest)


class AgentError(SparkfleetError):
    """The node-side agent refused or failed; `kind` says which (`ErrorKind`), never the words."""

    def __init__(
        self, message: str, hint: str | None = None, exit_code: int | None = None,
        kind: ErrorKind = ErrorKind.REFUSED,
    ) -> None:  # fmt: skip
        super().__init__(message, hint=hint, exit_code=exit_code)
        self.kind = kind


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
                kind=ErrorKind.CRASHED,
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
            kind=error_kind(answer),
        )
    return answer


def ask(runner, request: Request, timeout: float = 120, call: Call | None = None) -> dict:
    """Run `request`'s action on the node `runner` reaches: its answer (AgentError on a refusal).
    `call`: the agent call to use instead of `call_agent` (tests and the gateway hand in theirs)."""
    return (call or call_agent)(runner, request.ACTION, request.encode(), timeout=timeout)


def ask_host(
    inv: Inventory, host: str, request: Request, timeout: float = 120, call: Call | None = None
) -> dict:
    """`ask` the agent on the inventory's `host`: the one way a controller module reaches a node."""
    return ask(connect(inv.host(host)), request, timeout, call)


def lane_request(kind: type[L], inv: Inventory, lane: str, host: str, **extra: Any) -> L:
    """An agent request about `lane` on `host`: the lane and where its records live there, plus `extra`."""
    return kind(lane=lane, state_dir=str(state_dir_of(inv.host(host))), **extra)
