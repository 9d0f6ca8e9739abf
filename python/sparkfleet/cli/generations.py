"""`sparkfleet watch|promote|rollback|history`: supervise a lane and move between its generations."""

from __future__ import annotations

import sys
import time
import traceback

import click

from ..base.errors import ExitCode, SparkfleetError
from .options import JSON, REPLICA
from .progress import Heartbeat, wants_bar
from .render import echo_json, load_inventory
from .values import POSITIVE_SECONDS, SECONDS


def _event(msg: str) -> None:
    click.echo(f"· {msg}", err=True)


@click.command("watch")
@click.argument("lane")
@click.option(
    "--interval",
    type=POSITIVE_SECONDS,
    show_default="recipe [watch], else 30",
    help="Seconds between generation probes.",
)
@click.option(
    "--latency",
    type=POSITIVE_SECONDS,
    show_default="recipe [watch], else 20",
    help="A probe's latency bound in seconds (<= interval; with only --interval, at most the interval).",
)
@click.option(
    "--max-restarts",
    type=click.IntRange(min=0),
    show_default="recipe [watch], else 3",
    help="Restarts allowed within --window.",
)
@click.option(
    "--window",
    type=POSITIVE_SECONDS,
    show_default="recipe [watch], else 3600",
    help="Restart budget window in seconds.",
)
@click.option(
    "--backoff",
    type=SECONDS,
    show_default="recipe [watch], else 10",
    help="First restart delay in seconds; doubles per restart.",
)
@click.option(
    "--probes", type=click.IntRange(min=1), default=None, show_default="forever",
    help="Stop after this many probes.",
)  # fmt: skip
@click.option("--allow-drift", is_flag=True, help="Relaunches may run on a drifted host stack.")
@REPLICA
@JSON
@click.pass_context
def watch(
    ctx: click.Context,
    lane: str,
    interval: float | None,
    latency: float | None,
    max_restarts: int | None,
    window: float | None,
    backoff: float | None,
    probes: int | None,
    allow_drift: bool,
    replica: int,
    as_json: bool,
) -> None:
    """Probe LANE with a known-answer generation; on failure bundle an incident and restart within a budget.

    On a terminal a one-line heartbeat shows the last probe while the lane is healthy. Exits 0 (ok)
    when --probes ran out or Ctrl-C ended it (the lane runs on; the counts so far are printed),
    1 (shortfall) when the restart budget was spent and the lane was stopped (a person is needed; a
    unit running this should not restart it: RestartPreventExitStatus=1), 70 (crashed) when watch
    itself crashed (a bug; Restart=on-failure restarts it). A probe that fails in any way, however
    malformed the answer, is an incident, never a crash. With only --interval given, the latency
    bound is at most the interval.

    \b
    Examples:
      sparkfleet watch demo-exl3-2x        # until Ctrl-C
      sparkfleet watch demo-exl3-2x --interval 10 --probes 3 --json
    """
    from ..lane.replicas import replica_inventory
    from ..ops.supervisor import watch_lane, watch_settings

    inv = replica_inventory(load_inventory(ctx), lane, replica)  # one copy per watch (its own unit)
    settings = watch_settings(
        inv.lane(lane).sections, interval_s=interval, latency_s=latency, max_restarts=max_restarts,
        window_s=window, backoff_s=backoff,
    )  # fmt: skip
    heart = Heartbeat(wants_bar(as_json))

    def beat(state: str, out, res) -> None:
        """A terminal's heartbeat after every probe: its result, when it ran, the counts so far."""
        if state not in ("watching", "failing") or res is None:
            return
        mark = "♥" if res.ok else "✗"
        state = f"ok in {res.latency_s:.2f} s" if res.ok else "FAILED"
        heart.beat(
            f"{mark} {lane}: probe {out.probes} {state} at {time.strftime('%H:%M:%S')}, every "
            f"{settings.interval_s:g} s · {out.failures} failed, {out.restarts} restarts · Ctrl-C ends"
        )

    try:
        out = watch_lane(
            inv, lane, settings, max_probes=probes, allow_drift=allow_drift,
            on_event=lambda msg: heart.say(f"· {msg}"), on_state=beat,
        )  # fmt: skip
    except SparkfleetError:
        raise
    except Exception:  # noqa: BLE001 - a bug in the supervisor: its own code, so the unit restarts it
        traceback.print_exc()  # the journal keeps the traceback for the bug report
        raise SparkfleetError(
            f"sparkfleet watch {lane} crashed (a bug; the traceback is above)",
            hint=f"exit {int(ExitCode.CRASHED)}: a unit with Restart=on-failure restarts it",
            exit_code=ExitCode.CRASHED,
        ) from None
    finally:
        heart.end()
    if as_json:
        echo_json(out)
    else:
        ended = " (Ctrl-C: stopped watching; the lane runs on)" if out.interrupted else ""
        click.echo(f"{lane}: {out.probes} probes, {out.failures} failed, {out.restarts} restarts{ended}")
        for i in out.incidents:
            click.echo(f"  incident {i.bundle}: {i.reason}" + (" (restarted)" if i.restarted else ""))
        if out.needs_human:
            click.secho(out.message, fg="red")
    if out.needs_human:
        sys.exit(ExitCode.SHORTFALL)


@click.command("promote")
@click.argument("lane")
@click.option(
    "--report", "report_ref", show_default="the newest since launch", help="Bench report to gate on."
)
@click.option(
    "--first",
    is_flag=True,
    help="No [bench] baseline: accept a passing bench without comparing it (start over).",
)
@JSON
@click.pass_context
def promote(ctx: click.Context, lane: str, report_ref: str | None, first: bool, as_json: bool) -> None:
    """Mark LANE's running generation good: smoke must pass and the bench must pass the baseline gate.

    The baseline is the recipe's [bench] baseline, else the report that made the last good
    generation good. A lane with neither (its first promotion) takes a passing bench as its first
    good and says so. Exits 0 (ok) promoted, 1 (shortfall) not promoted (the output says which gate).

    \b
    Examples:
      sparkfleet promote demo-exl3-2x --first
      sparkfleet promote demo-exl3-2x --first --json
      sparkfleet promote dsv41-flash-exl3-2x   # real fleet: gated on the recipe's [bench] baseline
    """
    from ..bench.gate import promote_lane

    res = promote_lane(load_inventory(ctx), lane, report_ref=report_ref, first=first)
    if as_json:
        echo_json(res)
    else:
        mark = click.style("promoted", fg="green") if res.promoted else click.style("NOT promoted", fg="red")
        click.echo(f"{lane} generation {res.generation}: {mark}")
        click.echo(f"  smoke: {'passed' if res.smoke_ok else 'FAILED'}")
        click.echo(f"  bench: {res.bench_report or '-'} ({res.gate})")
        for r in res.regressions:
            click.echo(f"    {r}")
    if not res.promoted:
        sys.exit(ExitCode.SHORTFALL)


@click.command("rollback")
@click.argument("lane")
@click.option("--no-canary", is_flag=True, help="Skip the fabric canary.")
@click.option("--allow-drift", is_flag=True, help="Launch even if a host's stack drifted from fleet.toml.")
@click.option(
    "--to", "release_name", default=None, help="A release (`release cut`): its generation and image digest."
)
@JSON
@click.pass_context
def rollback(
    ctx: click.Context, lane: str, no_canary: bool, allow_drift: bool, release_name: str | None, as_json: bool
) -> None:
    """Stop LANE and relaunch its last good generation (its recipe, pins and image) on every host.

    With --to NAME: release NAME's generation, after every host pulled its image by digest.

    \b
    Examples:
      sparkfleet rollback demo-exl3-2x
      sparkfleet rollback dsv41-flash-4x-mia --to r39    # real fleet: a cut release
    """
    from ..launch.revert import rollback_lane

    back = rollback_lane(
        load_inventory(ctx),
        lane,
        release_name=release_name,
        canary=not no_canary,
        allow_drift=allow_drift,
        on_event=_event,
    )
    good, report, ok = back.good, back.report, back.ok
    if as_json:
        echo_json({"rolled_back_to": good["id"], "ok": ok, "generation": (report.generation or {}).get("id"),
                   "ready": report.ready})  # fmt: skip
    else:
        state = click.style("ready", fg="green") if ok else click.style("NOT ready", fg="red")
        ref = (good.get("image") or {}).get("ref") or f"recipe {good['recipe_sha256'][:12]}, no image"
        click.echo(f"{lane}: relaunched good generation {good['id']} ({ref}): {state}")
    if not ok:
        sys.exit(ExitCode.SHORTFALL)


@click.command("history")
@click.argument("lane")
@JSON
@click.pass_context
def history(ctx: click.Context, lane: str, as_json: bool) -> None:
    """LANE's generations, newest first: status, good, image, boot, drift, and the reports of each.

    \b
    Examples:
      sparkfleet history demo-exl3-2x
      sparkfleet history demo-exl3-2x --json
    """
    from ..bench.generation_reports import lane_history

    found = lane_history(load_inventory(ctx), lane)
    rows, skipped, failed = found.generations, found.skipped, found.failed  # failed: marked ✕ in the list
    if as_json:
        echo_json({"lane": lane, "generations": rows, "skipped": skipped})
        return
    for line in skipped:
        click.secho(f"skipped (not a valid generation): {line}", fg="yellow", err=True)
    if not rows:
        click.echo(f"{lane}: no generations yet (each launch records one)")
    for g in rows:
        good = click.style("good", fg="green") if g["good"] else "    "
        boot = g["boot"]
        took = f"{boot['time_to_ready_s']:.1f} s" if boot.get("time_to_ready_s") else "-"
        cache = {"none": "no-cache"}.get(boot["cache"], boot["cache"])
        click.echo(
            f"{g['id']}  {good}  {g['status']:7} {cache:4} boot {took:>8}  "
            f"{g['image'] or 'no image'}  recipe {g['recipe_sha256']}"
        )
        for line in ([boot["regression"]] if boot.get("regression") else []) + g["drift"]:
            click.echo(f"    ! {line}")
        if g.get("rolled_back_to"):
            since = f" from {g['rolled_back_from']}" if g.get("rolled_back_from") else ""
            click.echo(f"    rolled back{since} to {g['rolled_back_to']}")
        for r in g["reports"]:
            mark = "" if failed.get(r) is None else f"✕ {failed[r]} "
            click.echo(f"    report {mark}{r}")
