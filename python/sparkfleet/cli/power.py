"""`sparkfleet power on|status HOST`: wake a Spark with Wake-on-LAN and wait for its ssh."""

from __future__ import annotations

import sys

import click

from ..base.errors import ExitCode
from .options import JSON
from .render import complete, echo_json, load_inventory, to_jsonable
from .values import POSITIVE_SECONDS


@click.group()
def power() -> None:
    """Power state of the fleet's Sparks: `status` (does ssh answer?) and `on` (Wake-on-LAN)."""


@power.command("status")
@click.argument("hosts", nargs=-1, shell_complete=complete("host"))
@JSON
@click.pass_context
def status(ctx: click.Context, hosts: tuple[str, ...], as_json: bool) -> None:
    """Whether each HOST (default: every host) answers ssh; exit 4 (unreachable) when one does not.

    \b
    Examples:
      sparkfleet power status               # real fleet: ssh to each host
      sparkfleet power status dgx3 dgx4 --json   # real fleet
    """
    from ..ops.power import power_status

    inv = load_inventory(ctx)
    states = [power_status(inv, h) for h in (hosts or tuple(inv.hosts))]
    if as_json:
        echo_json([to_jsonable(s) for s in states])
    else:
        for s in states:
            click.echo(s.line())
    if not all(s.on for s in states):
        sys.exit(ExitCode.UNREACHABLE)


@power.command("on")
@click.argument("hosts", nargs=-1, required=True, shell_complete=complete("host"))
@click.option("--timeout", type=POSITIVE_SECONDS, default=600.0, show_default=True,
              help="Seconds to wait for ssh.")  # fmt: skip
@click.option("--poll", type=POSITIVE_SECONDS, default=5.0, show_default=True,
              help="Seconds between ssh checks.")  # fmt: skip
@JSON
@click.pass_context
def on(ctx: click.Context, hosts: tuple[str, ...], timeout: float, poll: float, as_json: bool) -> None:
    """Wake each HOST (its `mac` in hosts/fleet.toml) and wait until it answers ssh.

    \b
    Examples:
      sparkfleet power on dgx3 dgx4         # real fleet: Wake-on-LAN
      sparkfleet power on dgx4 --timeout 300 --json   # real fleet
    """
    from ..ops.power import power_on

    inv = load_inventory(ctx)
    say = (lambda _m: None) if as_json else (lambda m: click.echo(m, err=True))
    states = [power_on(inv, h, timeout_s=timeout, poll_s=poll, on_event=say) for h in hosts]
    if as_json:
        echo_json([to_jsonable(s) for s in states])
    else:
        for s in states:
            click.echo(s.line())
