"""`sparkfleet stage` and `sparkfleet verify`: NAS hub cache → node-local NVMe, verified."""

from __future__ import annotations

import contextlib
import functools
import sys
from pathlib import Path

import click

from .. import __version__
from ..base.errors import ExitCode, SparkfleetError
from ..roofline.stagebound import staging_bound_of_run
from ..stage import local, remote
from ..stage.events import EventsProgress
from ..stage.local import Selection, known_names, parse_ports, parse_share
from ..stage.remote_verify import VerifyOptions, verify_hosts
from ..stage.transport import AUTO, DEFAULT_TRANSPORT, TRANSPORTS, resolve_transport
from ..stage.verify import verify_note
from .options import JSON
from .progress import FleetProgress, RichStageProgress, wants_bar
from .render import complete, echo_json, human_bytes, load_inventory
from .stagelines import kit_line, kit_verdict_line, plan_line, print_space, print_stage_run
from .values import SECONDS, SIZE_GIB


def selectors(fn):
    """The options `stage` and `verify` share: a HOST (+ --lane) from the inventory, or direct mode."""
    options = [
        click.argument("host", required=False, shell_complete=complete("host")),
        click.option("--lane", show_default="every lane on HOST", help="Only this lane's repos."),
        click.option("--source", type=click.Path(path_type=Path), help="Direct mode: the source hub cache."),
        click.option(
            "--dest", type=click.Path(path_type=Path), help="Direct mode: the destination hub cache."
        ),
        click.option(
            "--repo", "repos", multiple=True, help="Direct mode: ORG/NAME[@REV] (REV: ref or commit)."
        ),
        click.option("--include", multiple=True, help="Only paths matching GLOB (fnmatch; `*` crosses /)."),
        click.option("--exclude", multiple=True, help="Never paths matching GLOB (e.g. 'page15/*')."),
        click.option(
            "--full",
            "verify_mode",
            flag_value="full",
            default="sample",
            show_default=False,
            help="Check every byte (sha256 against a blob's name, else the source's digest). Without it: "
            "size + 16 sampled 64 KiB windows a file, which a changed byte between the windows passes.",
        ),
        JSON,
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@click.command()
@selectors
@click.option(
    "--dry-run", is_flag=True, help="Print the plan (bytes per repo, excluded, links); write nothing."
)
@click.option(
    "--jobs", default=4, show_default=True, type=click.IntRange(1, 64), help="Parallel copy workers."
)
@click.option(
    "--reserve-gib", type=SIZE_GIB, show_default="the host's reserve_gib", help="Free space to leave."
)
@click.option(
    "--wait", "wait_seconds", default=0.0, type=SECONDS, help="Wait this long for another run's lock."
)
@click.option("--fanout", is_flag=True, help="With --lane, no HOST: blobs leave the NAS once.")
@click.option("--here", is_flag=True, help="Run on this machine even if HOST looks remote.")
@click.option("--events", is_flag=True, help="Progress and result as JSON lines.")
@click.option("--share", "share_spec", hidden=True, help="Fan-out wave 1: I/N, place only share I of N.")
@click.option("--peers", "peer_spec", hidden=True, help="Fan-out wave 2: the lane's hosts in share order.")
@click.option("--require-version", hidden=True, help="Refuse unless this sparkfleet is that version.")
@click.option(
    "--peer-transport",
    type=click.Choice([AUTO, *TRANSPORTS]),
    default=DEFAULT_TRANSPORT,
    show_default=True,
    help="Fan-out pulls between hosts: ssh, ssh-fast (AES-GCM), rsyncd (fabric only; SECURITY.md); "
    "auto: rsyncd when every lane host has a fabric_ip, else ssh-fast.",
)
@click.option("--peer-ports", "ports_spec", hidden=True, help="Fan-out wave 2: the peers' rsyncd ports.")
@click.option("--serve-peers", is_flag=True, hidden=True, help="Serve the local hub to --peers (rsyncd).")
@click.option(
    "--ssh-config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="SPARKFLEET_SSH_CONFIG",
    show_default="~/.ssh/config",
    help="ssh_config for reaching hosts and peers.",
)
@click.pass_context
def stage(
    ctx,
    host,
    lane,
    source,
    dest,
    repos,
    include,
    exclude,
    verify_mode,
    as_json,
    dry_run,
    jobs,
    reserve_gib,
    wait_seconds,
    fanout,
    here,
    events,
    share_spec,
    peer_spec,
    require_version,
    ssh_config,
    peer_transport,
    ports_spec,
    serve_peers,
) -> None:
    """Stage the repos HOST's lanes need from its NAS hub to its local hub.

    HOST is staged here when it is this machine (or with --here), else over ssh on HOST itself.
    Without HOST, --lane stages every host of the lane in parallel (--fanout: NAS read once).

    \b
    Examples:
      sparkfleet stage dgx1 --dry-run
      sparkfleet stage dgx1 --lane demo-exl3-2x --full
      sparkfleet stage --lane demo-exl3-2x --fanout
      sparkfleet stage --source .demo/nas/hub --dest local/hub --repo demo-org/DeepSeek-V4.1-Flash-EXL3-3bpw
    """
    if require_version and require_version != __version__:
        error = SparkfleetError(
            f"sparkfleet here is {__version__}, the coordinator runs {require_version}",
            hint="deploy one sparkfleet to every host (deploy .#<host>.sparkfleet)",
        )
        if events:
            EventsProgress().error(error)
            sys.exit(error.exit_code)
        raise error
    share = parse_share(share_spec)  # the wave options, refused before any work
    ports = parse_ports(ports_spec)
    sel = Selection(host, lane, source, dest, tuple(repos), tuple(include), tuple(exclude))
    load = functools.partial(load_inventory, ctx)
    if sel.fleet_wide(here):
        inv = load()
        known_names(inv, lane, peer_spec)
        if host is None or not remote.is_this_host(inv.host(host)):
            hosts = [host] if host else list(inv.lane(lane).replica_hosts)  # every copy's
            options = remote.StageOptions(
                lane, verify_mode, jobs, reserve_gib, wait_seconds, include, exclude, ssh_config,
                peer_transport,
            )  # fmt: skip
            if dry_run:
                _fleet_dry_run(inv, hosts, options, fanout and host is None, as_json)
                return
            outcomes = _run_fleet(inv, hosts, options, fanout and host is None, as_json)
            if not all(o.ok for o in outcomes):
                sys.exit(max((o.exit_code or ExitCode.SHORTFALL) for o in outcomes if not o.ok))
            return
    # The lanes' pinned kit checkouts ([[launch.trees]]): staged with the models, on the host itself;
    # not by a fan-out share (wave 2 stages them) nor by a host serving its peers.
    on_host = bool(host) and not (sel.direct or share_spec or serve_peers)
    here_run = local.prepare(sel, load, reserve_gib, with_kits=on_host)
    if dry_run:
        plan = local.dry_run(here_run)
        if as_json or events:
            echo_json(plan)
        else:
            for p in plan["plans"]:
                click.echo(plan_line(p))
            for k in plan["kits"]:
                click.echo(kit_line(k))
            print_space(plan["space"])
        if not plan["space"]["ok"]:
            sys.exit(ExitCode.SPACE)  # where the real run would stop before byte one
        return
    peer_transport = resolve_transport(peer_transport, bool(ports_spec))  # the coordinator sends concrete
    secret = sys.stdin.readline().strip() if peer_transport == "rsyncd" and peer_spec else None
    if serve_peers:  # rsyncd fan-out: this host serves its hub until the coordinator closes stdin
        sink = EventsProgress()
        try:
            remote.serve_peers(
                load(), host, peer_spec.split(","), secret or "", lambda p: sink.emit("serving", port=p)
            )
        except SparkfleetError as exc:
            sink.error(exc)
            sys.exit(exc.exit_code)
        return
    peers = tuple(peer_spec.split(",")) if peer_spec else ()
    wave = local.Wave(share, peers, peer_transport, ports, secret, ssh_config)
    run_stage = functools.partial(
        local.stage_here, here_run, sel, load, wave, verify_mode=verify_mode, jobs=jobs,
        wait_seconds=wait_seconds,
    )  # fmt: skip
    if events:
        sink = EventsProgress()
        try:
            run, kit_results = run_stage(progress=sink)
        except SparkfleetError as exc:
            sink.error(exc)
            sys.exit(exc.exit_code)
        sink.result(local.record(here_run, wave, run, kit_results, staging_bound_of_run))
        sys.exit(ExitCode.OK if run.ok else ExitCode.SHORTFALL)
    bar = RichStageProgress() if wants_bar(as_json) else None
    with bar if bar else contextlib.nullcontext():
        run, kit_results = run_stage(progress=bar)
    summary = local.record(here_run, wave, run, kit_results, staging_bound_of_run)
    if as_json:
        echo_json(summary)
    else:
        print_stage_run(summary)
    if not run.ok:
        sys.exit(ExitCode.SHORTFALL)


def _run_fleet(inv, hosts: list[str], options, fanout: bool, as_json: bool) -> list:
    """Stage several hosts (or one remote host) with one combined progress view and summary."""
    display = FleetProgress(hosts) if wants_bar(as_json) else None
    with display if display else contextlib.nullcontext():
        outcomes = remote.stage_hosts(inv, hosts, options, display.event if display else _ignore, fanout)
    if as_json:
        echo_json({"ok": all(o.ok for o in outcomes), "fanout": fanout, "hosts": outcomes})
        return outcomes
    for o in outcomes:
        if o.run:
            click.echo(f"{o.host}:")
            print_stage_run(o.run, prefix="  ")
        if o.error:
            click.secho(f"{o.host}: error: {o.error}", fg="red")
            if o.hint:
                click.echo(f"  hint: {o.hint}")
            if o.log:
                click.echo(o.log_tail)
    nas = sum(o.nas_bytes for o in outcomes)
    peer = sum(o.run.get("peer_bytes", 0) for o in outcomes if o.run)
    peers = f", from peers {human_bytes(peer)}" if fanout else ""
    click.echo(f"{len(hosts)} host(s): {sum(o.ok for o in outcomes)} ok; from NAS {human_bytes(nas)}{peers}")
    return outcomes


def _verify_fleet(inv, hosts: list[str], options: VerifyOptions, as_json: bool) -> None:
    """Verify each host on the host itself; one summary; exit 0 only when every host is complete."""
    results = verify_hosts(inv, hosts, options)
    ok = all(r.ok for r in results)
    repos = [repo for r in results if r.report for repo in r.report["repos"]]
    note = verify_note(options.verify_mode, repos)
    if as_json:
        hosts_json = [{k: v for k, v in vars(r).items() if k != "ran_on"} for r in results]
        echo_json({"ok": ok, "mode": options.verify_mode, "note": note, "hosts": hosts_json})
    else:
        for r in results:
            if r.report is not None:
                t = r.report
                click.echo(
                    f"{r.host}: links ok: {t['links_ok']}, dangling: {t['dangling']}, "
                    f"mismatches: {t['mismatches']}, missing: {t['missing']}"
                    + ("" if r.ok else "  INCOMPLETE")
                )
                for repo in t["repos"]:
                    for problem in repo.get("problems", [])[:10]:
                        click.echo(f"  {problem}")
                for k in t.get("kits", []):
                    click.echo(kit_verdict_line(k, prefix=f"{r.host}: "))
            else:
                click.secho(f"{r.host}: error: {r.error}", fg="red")
                if r.hint:
                    click.echo(f"  hint: {r.hint}")
        click.echo(f"note: {note}")
    if not ok:
        codes = [r.exit_code for r in results if not r.ok and r.report is None and r.exit_code]
        sys.exit(max(codes) if codes else ExitCode.SHORTFALL)


def _ignore(host: str, event: dict) -> None:
    pass


def _fleet_dry_run(inv, hosts: list[str], options, fanout: bool, as_json: bool) -> None:
    """Show every host's plan, who would take what from where, and whether each host has the space
    the real run checks first (stage/fleet_dry_run.py decides)."""
    from ..stage.fleet_dry_run import fleet_dry_run

    dry = fleet_dry_run(inv, hosts, options, fanout)
    answers, plans, spaces, short = dry.answers, dry.plans, dry.spaces, dry.short
    wave1, pulls, nas_reads = dry.wave1, dry.pulls, dry.nas_reads
    if as_json:
        echo_json(
            {"dry_run": True, "fanout": fanout, "plans": plans, "nas_reads": nas_reads, "pulls": pulls,
             "space": spaces, "kits": {h: a.get("kits", []) for h, a in answers.items()}}
        )  # fmt: skip
        if short:
            sys.exit(ExitCode.SPACE)
        return
    for h, a in answers.items():
        for p in a["plans"]:
            click.echo(plan_line(p, prefix=f"{h}: "))
        for k in a.get("kits", []):
            click.echo(kit_line(k, prefix=f"{h}: "))
    for h, s in spaces.items():
        print_space(s, prefix=f"{h}: ")
    for h, rels in wave1.items():
        click.echo(f"{h}: from NAS {len(rels)} files ({human_bytes(nas_reads[h])})")
    for h in hosts:
        mine = [p for p in pulls if p.host == h]
        if mine:
            seeds = ", ".join(sorted({p.seed for p in mine}))
            size = human_bytes(sum(p.size for p in mine))
            click.echo(f"{h}: from peers {len(mine)} files ({size}) via {seeds}")
    if short:
        sys.exit(ExitCode.SPACE)


@click.command()
@selectors
@click.option("--here", is_flag=True, help="Verify on this machine even if HOST looks remote.")
@click.option(
    "--ssh-config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="SPARKFLEET_SSH_CONFIG",
    show_default="~/.ssh/config",
    help="ssh_config for reaching hosts.",
)
@click.pass_context
def verify(
    ctx, host, lane, source, dest, repos, include, exclude, verify_mode, as_json, here, ssh_config
) -> None:
    """Check HOST's local tree against the source and change nothing; exit 1 (shortfall) if it falls short.

    The kit checkouts HOST's lanes bind ([[launch.trees]]) are checked too: each at its pinned rev,
    clean and holding the files the trees need (✗ names the fix: `sparkfleet stage HOST --lane L`).

    Like `stage HOST`, HOST is checked on HOST itself (over ssh when it is another machine);
    without HOST, --lane checks every host of the lane in parallel.

    \b
    Examples:
      sparkfleet verify dgx1
      sparkfleet verify dgx1 --lane demo-exl3-2x --full
      sparkfleet verify --lane demo-exl3-2x --json
      sparkfleet verify --source .demo/nas/hub --dest local/hub --repo demo-org/DeepSeek-V4.1-Flash-EXL3-3bpw
    """
    sel = Selection(host, lane, source, dest, tuple(repos), tuple(include), tuple(exclude))
    load = functools.partial(load_inventory, ctx)
    if sel.fleet_wide(here):
        inv = load()
        known_names(inv, lane)
        if host is None or not remote.is_this_host(inv.host(host)):
            hosts = [host] if host else list(inv.lane(lane).replica_hosts)  # every copy's
            _verify_fleet(inv, hosts, VerifyOptions(lane, verify_mode, include, exclude, ssh_config), as_json)
            return
    result = local.verify_here(sel, load, verify_mode)
    reports, kits, totals, note = result.reports, result.kits, result.totals, result.note
    if as_json:
        echo_json(result.to_dict(verify_mode))
    else:
        for r in reports:
            click.echo(f"{r.repo}@{r.commit[:12]}: {r.line()}, missing: {r.missing}")
            for problem in r.problems[:20]:
                click.echo(f"  {problem}")
        for k in kits:
            click.echo(kit_verdict_line(k))
        click.echo(f"note: {note}")
        click.echo(
            f"links ok: {totals['links_ok']}, dangling: {totals['dangling']}, "
            f"mismatches: {totals['mismatches']}, missing: {totals['missing']}"
            + (f", kits ok: {sum(k['ok'] for k in kits)}/{len(kits)}" if kits else "")
        )
    if not result.ok:
        sys.exit(ExitCode.SHORTFALL)
