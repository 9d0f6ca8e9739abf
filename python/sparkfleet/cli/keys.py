"""`sparkfleet keys rotate LANE` (a lane's key) and `keys add|list|revoke USER` (the gateway's users)."""

from __future__ import annotations

from pathlib import Path

import click

from .gateway import STATE_OPTION, default_state_dir
from .launch import REPLICA
from .render import echo_json, load_inventory


@click.group("keys")
def keys() -> None:
    """API keys: a lane's (0600 on each of its hosts) and the gateway's per-user keys (0600 here)."""


@keys.command("rotate")
@click.argument("lane")
@REPLICA
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def rotate(ctx: click.Context, lane: str, replica: int, as_json: bool) -> None:
    """Make a new key for LANE and install it on every host of the lane; the key is never shown.

    A running lane keeps serving with its old key until it is launched again. Each copy of a lane
    with [gateway] replicas holds its own key on its own hosts: --replica N rotates copy N's.

    \b
    Examples:
      sparkfleet keys rotate demo-exl3-2x
      sparkfleet keys rotate demo-exl3-2x --json
    """
    from ..launch.lanekeys import rotate as do_rotate
    from ..launch.replicas import instance_name, replica_inventory
    from ..nodecall import call_agent

    done = do_rotate(replica_inventory(load_inventory(ctx), lane, replica), lane, call_agent)
    if as_json:
        echo_json({"lane": lane, "replica": replica, "hosts": list(done.changed + done.unchanged)})
        return
    hosts = ", ".join(done.changed + done.unchanged)
    name = instance_name(lane, replica)
    click.echo(f"new API key for {name} on {hosts}; relaunch {name} to serve with it")


@keys.command("add")
@click.argument("user")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the key to this file (0600) instead of printing it.")  # fmt: skip
@STATE_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def add(user: str, out: Path | None, state_dir: Path | None, as_json: bool) -> None:
    """Make a gateway key for USER; a running gateway takes it at once.

    The key is shown once (or written to --out), never again: give it to the user. It opens the
    gateway only; the lanes behind it keep the gateway's own key.

    \b
    Examples:
      sparkfleet keys add alice
      sparkfleet keys add bob --out bob.key
    """
    from ..atomic import write_bytes
    from ..serving.gateway import add_user

    key, live = add_user(state_dir or default_state_dir(), user)
    if out is not None:
        write_bytes(out, (key + "\n").encode(), mode=0o600)
    shown = None if out is not None else key
    if as_json:
        echo_json({"user": user, "key": shown, "out": str(out) if out else None, "gateway_reloaded": live})
        return
    click.echo(f"{user}: key written to {out}" if out else key)
    click.echo(f"· {user} can use the gateway" + (" now" if live else " once it is up"), err=True)


@keys.command("list")
@STATE_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def list_(state_dir: Path | None, as_json: bool) -> None:
    """The users who hold a gateway key (names and dates; never a key).

    \b
    Examples:
      sparkfleet keys list
    """
    import time

    from ..serving.users import listing

    got = listing(state_dir or default_state_dir())
    if as_json:
        echo_json([{"user": u.name, "created": u.created} for u in got])
        return
    for u in got:
        click.echo(f"{u.name}\t{time.strftime('%Y-%m-%d %H:%M', time.localtime(u.created))}")
    if not got:
        click.echo("no user keys (the operator's gateway key only)", err=True)


@keys.command("revoke")
@click.argument("user")
@STATE_OPTION
def revoke(user: str, state_dir: Path | None) -> None:
    """Remove USER's gateway key; a running gateway refuses it before this returns.

    \b
    Examples:
      sparkfleet keys revoke alice
    """
    from ..serving.gateway import revoke_user

    live = revoke_user(state_dir or default_state_dir(), user)
    click.echo(f"{user}: key revoked" + ("; the gateway refuses it now" if live else ""))
