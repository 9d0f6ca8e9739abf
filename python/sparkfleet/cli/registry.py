"""`sparkfleet registry init|serve`: the fleet registry on the head host (docs/images.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from ..base.errors import ExitCode, SparkfleetError
from .options import JSON
from .render import echo_json
from .values import WRITABLE_DIR


@click.group("registry")
def registry() -> None:
    """The fleet registry (Debian's docker-registry, TLS from the fleet CA) on the head host."""


@registry.command("init")
@click.option("--address", envvar="SPARKFLEET_REGISTRY", show_envvar=True, required=True,
              help="HOST:PORT the hosts pull from (the head's fabric address): anonymous, read-only, "
                   "and listening on this address only.")  # fmt: skip
@click.option("--push-address", default=None, show_default="HOST:PORT+1",
              help="HOST:PORT where pushes and release tags go, behind the push login.")  # fmt: skip
@click.option("--storage", type=WRITABLE_DIR,
              default=Path("/var/lib/docker-registry"), show_default=True,
              help="Where the registry keeps blobs.")  # fmt: skip
@JSON
def init(address: str, push_address: str | None, storage: Path, as_json: bool) -> None:
    """Make the fleet CA (once), the registry's certificate, its two configs and the push login.

    Hosts pull from ADDRESS without a login (read-only); pushes and release tags go to the push
    address with the login in $SPARKFLEET_STATE_DIR/registry/push-auth.json (0600, kept on a rerun).
    Then run `sparkfleet registry serve` on the head host, and `sparkfleet bootstrap HOST` (with
    SPARKFLEET_REGISTRY set) on every host so docker and podman trust the CA.

    \b
    Examples:
      sparkfleet registry init --address 10.0.0.1:5000
      SPARKFLEET_REGISTRY=10.0.0.1:5000 sparkfleet registry init --json
    """
    from ..base.paths import operator_state_dir
    from ..images.registry_host import init as do_init

    out = do_init(operator_state_dir(), address, storage, push_address)
    if as_json:
        echo_json(out)
    else:
        click.echo(f"fleet CA {out['ca']}\n"
                   f"pulls: {out['address']} (anonymous, read-only: {out['config']})\n"
                   f"pushes: {out['push_address']} (login in {out['push_auth']}: {out['push_config']})\n"
                   "next: sparkfleet registry serve")  # fmt: skip


@registry.command("serve")
@click.option("--json", "as_json", is_flag=True,
              help="Print each listener (role, address, config, pid) as one JSON line once both answer, "
                   "and one line with their exit codes at the end.")  # fmt: skip
def serve(as_json: bool) -> None:
    """Run the registry in the foreground (what the sparkfleet-registry unit runs).

    It serves the two configs `registry init` wrote under the same state dir ($SPARKFLEET_STATE_DIR):
    pulls (anonymous, read-only) and pushes (the login), and stops both when either ends.

    \b
    Examples:
      SPARKFLEET_STATE_DIR=/var/lib/sparkfleet sparkfleet registry serve   # real fleet: its unit
      sparkfleet registry serve --json   # real fleet: on the head host, until Ctrl-C
    """
    from ..base.paths import operator_state_dir
    from ..images.registry_host import serve as run

    def ready(listeners: list[dict[str, Any]]) -> None:
        if as_json:
            click.echo(json.dumps({"event": "ready", "listeners": listeners}))
            return
        for lis in listeners:
            how = "anonymous, read-only" if lis["role"] == "pull" else "login required"
            click.echo(f"· {lis['role']}s at {lis['address']} ({how}; {lis['config']}, pid {lis['pid']})",
                       err=True)  # fmt: skip

    served = run(operator_state_dir(), on_ready=ready)  # Ctrl-C and SIGTERM go to both listeners
    stopped: dict[str, Any] = {"event": "stopped", "asked": served.asked, "exit_codes": served.exit_codes}
    if served.ok:
        if as_json:
            click.echo(json.dumps(stopped))
        return
    # a listener ended by itself (a taken port, a bad config): the pair is down
    message = "the registry stopped: " + ", ".join(
        f"{role} listener exited {code}" for role, code in served.exit_codes.items()
    )
    hint = "its own log lines are above; a unit with Restart= starts the pair again"
    if as_json:  # the last line of the stream says why, and stdout stays one JSON object a line
        click.echo(json.dumps({**stopped, "error": message, "hint": hint}))
        click.echo(f"error: {message}", err=True)
        sys.exit(ExitCode.SHORTFALL)
    raise SparkfleetError(message, hint=hint, exit_code=ExitCode.SHORTFALL)
