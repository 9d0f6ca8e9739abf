"""`sparkfleet keys rotate LANE`: a new API key on every host of the lane (never printed)."""

from __future__ import annotations

import click

from .render import echo_json, load_inventory


@click.group("keys")
def keys() -> None:
    """A lane's API key: a 0600 file under each host's state dir, read by the engine and the clients."""


@keys.command("rotate")
@click.argument("lane")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def rotate(ctx: click.Context, lane: str, as_json: bool) -> None:
    """Make a new key for LANE and install it on every host of the lane; the key is never shown.

    A running lane keeps serving with its old key until it is launched again.

    \b
    Examples:
      sparkfleet keys rotate dsv41-flash-4x-mia
      sparkfleet keys rotate dsv41-flash-4x-mia --json
    """
    from ..lanekeys import rotate as do_rotate
    from ..launch.nodecall import call_agent

    done = do_rotate(load_inventory(ctx), lane, call_agent)
    if as_json:
        echo_json({"lane": lane, "hosts": list(done.changed + done.unchanged)})
        return
    hosts = ", ".join(done.changed + done.unchanged)
    click.echo(f"new API key for {lane} on {hosts}; relaunch the lane to serve with it")
