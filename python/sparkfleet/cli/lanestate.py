"""`sparkfleet stop|status|logs`: a launched lane's ranks, stopped, asked how they run, or read."""

from __future__ import annotations

import sys
import time

import click

from ..base.errors import ExitCode, SparkfleetError
from .options import JSON, REPLICA
from .render import complete, echo_json, load_inventory


@click.command("stop")
@click.argument("lane", shell_complete=complete("lane"))
@REPLICA
@JSON
@click.pass_context
def stop(ctx: click.Context, lane: str, replica: int, as_json: bool) -> None:
    """Stop what sparkfleet started for LANE (recorded PIDs/containers only).

    \b
    Examples:
      sparkfleet stop demo-exl3-2x
      sparkfleet stop demo-exl3-2x --json
    """
    from ..launch.lane import stop_lane
    from ..launch.lanerun import replica_run

    run = replica_run(load_inventory(ctx), lane, replica)
    res = stop_lane(run, by="sparkfleet stop")
    lane = run.instance  # what the output names: LANE#N for replica N
    if as_json:
        echo_json(res)
    else:
        for r in res:
            click.echo(f"{r['host']}: rank {r.get('rank', '?')} {r.get('name', '')}: {r['detail']}")
        if not res:
            click.echo(f"{lane}: nothing recorded as running")
    if any(r.get("unreachable") for r in res):
        sys.exit(ExitCode.UNREACHABLE)
    if any(not r["stopped"] for r in res):
        sys.exit(ExitCode.SHORTFALL)


@click.command("status")
@click.argument("lane", shell_complete=complete("lane"))
@REPLICA
@JSON
@click.pass_context
def status(ctx: click.Context, lane: str, replica: int, as_json: bool) -> None:
    """Per rank: running or how it ended; the head's /health and /v1/models.

    A lane that is not running says how its last run ended: stopped by whom and when, or how each
    rank exited. Exits 0 (ok) only while every rank runs; 1 (shortfall) when the lane does not serve
    (stopped cleanly included: "stopped cleanly" names who stopped it); 4 (unreachable) when a host
    cannot be reached.

    \b
    Examples:
      sparkfleet status demo-exl3-2x
      sparkfleet status demo-exl3-2x --json
    """
    from ..launch.lanerun import replica_run
    from ..launch.lanestop import status_enforced  # [watchdog] scope = "lane" acts here too

    run = replica_run(load_inventory(ctx), lane, replica)
    st, _ = status_enforced(run)
    if as_json:
        echo_json({**st.to_dict(), "replica": replica})
    else:
        click.echo(f"{run.instance}: {st.running}/{st.expected} ranks running")
        if st.weights:
            click.secho(f"  {st.weights}", fg="yellow")
        for r in st.ranks:
            state = (
                "running"
                if r.running
                else r.detail
                if r.orphan_pid
                else f"stopped ({r.detail}, code {r.returncode})"
            )
            click.echo(f"  rank {r.rank} {r.host}: {r.name} {state}")
        if st.endpoints:
            e = st.endpoints
            click.echo(
                f"  head {st.head}:{st.port} /health={e['health']} /v1/models={e['models_status']}"
            )
        for e in st.errors:
            click.echo(f"  {e['host']}: {e['error']}")
        for line in _ended_lines(st, run.instance):
            click.echo(line)
    if any(e.get("code") == ExitCode.UNREACHABLE for e in st.errors):
        sys.exit(ExitCode.UNREACHABLE)
    if not st.ok:
        sys.exit(ExitCode.SHORTFALL)


def _when(t: float | None) -> str:
    """Local time of a record's timestamp; "?" for none (or one no clock can show)."""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "?"
    except (OverflowError, OSError, ValueError, TypeError):
        return "?"


def _ended_lines(st, lane: str) -> list[str]:
    """How a lane that runs nothing got there: its last run's stop, per rank, and what to run next."""
    if st.ranks or st.errors:
        return []
    if not st.ended:
        return [f"  no run recorded on its hosts: start it with `sparkfleet launch {lane}`"]
    lines = []
    if st.stopped_cleanly:
        last = max(st.ended, key=lambda e: e["stopped_at"])
        lines.append(f"  stopped cleanly at {_when(last['stopped_at'])} by {last['stopped_by']}")
    for e in st.ended:
        how = (f"{e['detail']} at {_when(e['stopped_at'])} by {e['stopped_by']}" if e["stopped_at"]
               else "stopped (how is not recorded)")  # fmt: skip
        lines.append(f"  rank {e['rank']} {e['host']}: {e['name']} started {_when(e['started_at'])}, {how}")
    lines.append(f"  next: `sparkfleet launch {lane}` (`sparkfleet logs {lane}` shows the last run's logs)")
    return lines


@click.command("logs")
@click.argument("lane", shell_complete=complete("lane"))
@click.argument("host", required=False, shell_complete=complete("host"))
@click.option(
    "-n", "--lines", type=click.IntRange(min=0), default=50, show_default=True, help="Lines per rank."
)
@click.option(
    "-f", "--follow", is_flag=True, help="Keep printing the log as it grows (HOST's, or the head's)."
)
@JSON
@click.pass_context
def logs(ctx: click.Context, lane: str, host: str | None, lines: int, follow: bool, as_json: bool) -> None:
    """The last lines of LANE's rank logs (on HOST, or every host).

    While the lane runs: the running ranks' logs. After it stopped: the last run's logs, marked so.
    `-f` follows until Ctrl-C, which ends it with exit 0 (ok).

    \b
    Examples:
      sparkfleet logs demo-exl3-2x
      sparkfleet logs demo-exl3-2x dgx2 -n 200
      sparkfleet logs demo-exl3-2x -f      # until Ctrl-C
    """
    from ..launch.lane import follow_lane, lane_logs
    from ..launch.lanerun import lane_run

    run = lane_run(load_inventory(ctx), lane)
    if follow:
        try:
            with follow_lane(run, host, lines) as stream:
                for line in stream:
                    click.echo(line, nl=False)
        except KeyboardInterrupt:  # how a follow ends: quietly, exit 0 (the lane is untouched)
            click.echo("", err=True)
        return
    answers = lane_logs(run, host, lines, answers=True)
    if as_json:
        echo_json({"lane": lane, "hosts": answers})
        return
    shown = 0
    for h, ans in answers.items():
        for rank, text in ans["logs"].items():
            last = " (last run; the lane is stopped)" if rank in ans.get("stopped", []) else ""
            click.secho(f"==> {h} rank {rank}{last}: {ans.get('log_paths', {}).get(rank, '')} <==", bold=True)
            click.echo(text)
            shown += 1
    if not shown:
        raise SparkfleetError(
            f"no log of {lane} on {host or 'any of its hosts'}: it never ran there (or its state_dir moved)",
            hint=f"sparkfleet launch {lane}",
            exit_code=ExitCode.SHORTFALL,
        )
