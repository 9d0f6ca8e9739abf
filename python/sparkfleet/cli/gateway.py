"""`sparkfleet gateway up|status|down`: one OpenAI endpoint (smg) in front of the serving lanes."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..base.errors import ExitCode
from ..base.paths import gateway_state_dir
from .options import JSON, READS_STATE, WRITES_STATE
from .render import echo_json, load_inventory
from .values import POSITIVE_SECONDS


@click.group("gateway")
def gateway() -> None:
    """One OpenAI endpoint for every lane with a [gateway] table (run it on the head host)."""


@gateway.command("up")
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True, help="Gateway port.")
@click.option("--bind", default="0.0.0.0", show_default=True, help="Address the gateway listens on.")
@click.option("--wait", "wait_s", type=POSITIVE_SECONDS, default=60.0, show_default=True,
              help="Seconds to wait.")  # fmt: skip
@WRITES_STATE
@JSON
@click.pass_context
def up(
    ctx: click.Context, port: int, bind: str, wait_s: float, state_dir: Path | None, as_json: bool
) -> None:
    """Start the gateway: each lane's served_model_name is a model id, replicas share one.

    The gateway's key becomes every gateway lane's key (a lane running with another key must be
    launched again; `up` names it), once the gateway answers: if it does not start, `up` says why
    and no lane's key changes. Clients send the gateway's key (or a user's, `keys add`) as a
    Bearer token; it opens the inference API only. smg's admin paths (/workers, ...) take the admin
    key, whose file `gateway status` names.

    \b
    Examples:
      sparkfleet gateway up
      sparkfleet launch demo-exl3-2x --replace   # a lane launched before `up` takes its key
      sparkfleet bench --gateway --quick
      sparkfleet gateway down
      sparkfleet gateway up --port 8080 --json
    """
    from ..remote.nodecall import call_agent
    from ..serving.gateway import up as do_up

    def event(msg: str) -> None:
        if not as_json:
            click.echo(f"· {msg}", err=True)

    st = do_up(load_inventory(ctx), state_dir or gateway_state_dir(), call_agent, bind=bind, port=port,
               wait_s=wait_s, on_event=event)  # fmt: skip
    if as_json:
        echo_json(st)
        return
    click.echo(f"gateway {st.get('url')} policy {st['policy']}: models {', '.join(st.get('models', []))}")
    for lane, what in st["lanes"].items():
        click.echo(f"  {lane}: {what}")


@gateway.command("run")
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True, help="Gateway port.")
@click.option("--bind", default="0.0.0.0", show_default=True, help="Address the gateway listens on.")
@WRITES_STATE
@click.option("--json", "as_json", is_flag=True,
              help="Print what it found (lanes, keys) as JSON, before the gateway's own log.")  # fmt: skip
@click.pass_context
def run(ctx: click.Context, port: int, bind: str, state_dir: Path | None, as_json: bool) -> None:
    """Run the gateway in the foreground (what the sparkfleet-gateway unit runs).

    The same gateway as `up`, as this process: it ends when the process is stopped (SIGTERM), its
    front (nginx) with it. `gateway status` and `keys add|revoke` reach it through its record.

    \b
    Examples:
      sparkfleet gateway run --port 18081      # until Ctrl-C
      sparkfleet gateway run --port 18081 --json   # until Ctrl-C
      SPARKFLEET_GATEWAY_STATE=/var/lib/sparkfleet/gateway sparkfleet gateway run   # real fleet: its unit
    """
    from ..remote.nodecall import call_agent
    from ..serving.gateway import run as do_run

    events: list[str] = []

    def event(msg: str) -> None:
        events.append(msg)
        if not as_json:
            click.echo(f"· {msg}", err=True)

    def starting(st: dict) -> None:  # the last word before this process becomes the gateway
        if as_json:
            echo_json({**st, "events": events})

    do_run(load_inventory(ctx), state_dir or gateway_state_dir(), call_agent, bind=bind, port=port,
           on_event=event, on_start=starting)  # fmt: skip


@gateway.command("status")
@READS_STATE
@JSON
def status(state_dir: Path | None, as_json: bool) -> None:
    """Is the gateway running, on which port and policy, and which model ids it serves.

    \b
    Examples:
      sparkfleet gateway status
      sparkfleet gateway status --json
    """
    from ..serving.gateway import status as do_status

    st = do_status(state_dir or gateway_state_dir())
    if as_json:
        echo_json(st)
    elif not st["running"]:
        click.echo("gateway: not running")
    else:
        click.echo(f"gateway {st['url']} (pid {st['pid']}) policy {st['policy']}: "
                   f"models {', '.join(st['models']) or 'none yet'}")  # fmt: skip
        for w in st["workers"]:
            click.echo(f"  {w['model']} <- {w['lane']} {w['url']}")
        click.echo(f"  admin API (/workers, ...): the key in {st['admin_key_file']}")
    if not st["running"]:
        sys.exit(ExitCode.SHORTFALL)


@gateway.command("down")
@READS_STATE
@JSON
def down(state_dir: Path | None, as_json: bool) -> None:
    """Stop the gateway `up` started (its recorded process only).

    \b
    Examples:
      sparkfleet gateway down
      sparkfleet gateway down --json
    """
    from ..serving.gateway import down as do_down

    stopped = do_down(state_dir or gateway_state_dir())
    if as_json:
        echo_json({"stopped": stopped})  # False: none was running
        return
    click.echo("gateway stopped" if stopped else "gateway was not running")
