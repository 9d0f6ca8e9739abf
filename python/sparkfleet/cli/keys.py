"""`sparkfleet keys rotate LANE` (a lane's key) and `keys add|list|revoke USER` (the gateway's users)."""

from __future__ import annotations

from pathlib import Path

import click

from ..base.paths import gateway_state_dir
from .options import JSON, READS_STATE, REPLICA, WRITES_STATE
from .render import echo_json, load_inventory


@click.group("keys")
def keys() -> None:
    """API keys: a lane's (0600 on each of its hosts) and the gateway's per-user keys (0600 here)."""


@keys.command("rotate")
@click.argument("lane")
@REPLICA
@JSON
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
    from ..lane.replicas import instance_name, replica_inventory
    from ..launch.lanekeys import rotate as do_rotate
    from ..remote.nodecall import call_agent

    done = do_rotate(replica_inventory(load_inventory(ctx), lane, replica), lane, call_agent)
    if as_json:
        echo_json({"lane": lane, "replica": replica, "hosts": list(done.changed + done.unchanged)})
        return
    hosts = ", ".join(done.changed + done.unchanged)
    name = instance_name(lane, replica)
    click.echo(f"new API key for {name} on {hosts}; relaunch {name} to serve with it")


def _warn_refused(refused: dict[str, str]) -> None:
    """Users whose key file the front left out: they get 401 until it is fixed; nobody else is held."""
    for user, why in sorted(refused.items()):
        click.echo(f"· {user} is refused at the gateway: {why}", err=True)
        click.echo(f"  fix: sparkfleet keys revoke {user}; sparkfleet keys add {user}", err=True)


@keys.command("add")
@click.argument("user")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the key to this file (0600) instead of printing it.")  # fmt: skip
@WRITES_STATE
@JSON
def add(user: str, out: Path | None, state_dir: Path | None, as_json: bool) -> None:
    """Make a gateway key for USER; a running gateway takes it at once.

    The key is shown once (or written to --out), never again: give it to the user. It opens the
    gateway's inference API only (chat, completions, embeddings, models); the lanes behind it keep
    the gateway's own key. If --out cannot be written, or the gateway does not take the key, no
    key is made: run it again.

    \b
    Examples:
      sparkfleet keys add alice
      sparkfleet keys add bob --out bob.key
    """
    from ..serving.gateway import add_user

    key, done = add_user(state_dir or gateway_state_dir(), user, out)
    shown = None if out is not None else key
    if as_json:
        echo_json({"user": user, "key": shown, "out": str(out) if out else None,
                   "gateway_reloaded": done.live, "refused_users": done.refused})  # fmt: skip
        return
    click.echo(f"{user}: key written to {out}" if out else key)
    click.echo(f"· {user} can use the gateway" + (" now" if done.live else " once it is up"), err=True)
    _warn_refused(done.refused)


@keys.command("list")
@READS_STATE
@JSON
def list_(state_dir: Path | None, as_json: bool) -> None:
    """The users who hold a gateway key (names and dates; never a key).

    A user whose revoke did not finish is listed as "revoking": `keys revoke USER` finishes it.

    \b
    Examples:
      sparkfleet keys list
      sparkfleet keys list --json
    """
    import time

    from ..serving.users import listing

    got = listing(state_dir or gateway_state_dir())
    if as_json:
        echo_json([{"user": u.name, "created": u.created, "revoking": u.revoking} for u in got])
        return
    for u in got:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(u.created))
        click.echo(f"{u.name}\t{when}" + (f"\trevoking (finish it: sparkfleet keys revoke {u.name})"
                                          if u.revoking else ""))  # fmt: skip
    if not got:
        click.echo("no user keys (the operator's gateway key only)", err=True)


@keys.command("revoke")
@click.argument("user")
@WRITES_STATE
@JSON
def revoke(user: str, state_dir: Path | None, as_json: bool) -> None:
    """Remove USER's gateway key; a running gateway refuses it before this returns.

    If it stops before that (an error, a kill), USER stays listed as revoking: run it again.

    \b
    Examples:
      sparkfleet keys revoke alice
      sparkfleet keys revoke bob --json
    """
    from ..serving.gateway import revoke_user

    done = revoke_user(state_dir or gateway_state_dir(), user)
    if as_json:
        echo_json({"user": user, "revoked": True, "gateway_refuses_it": done.live,
                   "refused_users": done.refused})  # fmt: skip
        return
    click.echo(f"{user}: key revoked" + ("; the gateway refuses it now" if done.live else ""))
    _warn_refused(done.refused)
