"""`sparkfleet stage` and `sparkfleet verify`: NAS hub cache → node-local NVMe, verified."""

from __future__ import annotations

import contextlib
import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .. import __version__
from ..base.errors import ExitCode, SparkfleetError
from ..base.units import byte_rate
from ..facts.hubcache import parse_repo_spec, repo_folder
from ..stage import execute, remote
from ..stage.events import EventsProgress
from ..stage.plan import StageRequest
from ..stage.remote_verify import VerifyOptions, verify_hosts
from ..stage.targets import kits_for_host, requests_for_host
from ..stage.transport import AUTO, DEFAULT_TRANSPORT, TRANSPORTS, resolve_transport
from ..stage.verify import verify_note
from .progress import FleetProgress, RichStageProgress, wants_bar
from .render import complete, echo_json, human_bytes, load_inventory
from .values import SECONDS, SIZE_GIB

if TYPE_CHECKING:  # annotations only: direct mode reads no inventory
    from ..fleet.inventory import Inventory


def _plan_kits(kits: list, state_dir) -> list[dict]:
    """What staging would do to each kit checkout (the dry run's `kits`)."""
    if not kits:
        return []
    # lazy: its git runner (pins) reads the inventory, and direct mode (which has no kit) must not
    from ..stage.kits import plan_kits

    return [k.as_dict() for k in plan_kits(kits, state_dir)]


def _stage_kits(kits: list, state_dir, host: str, **kw) -> list[dict]:
    """Stage each kit checkout (the run record's `kits`)."""
    if not kits:
        return []
    from ..stage.kits import stage_kits  # lazy, as _plan_kits

    return [k.as_dict() for k in stage_kits(kits, state_dir, host, **kw)]


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
        click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def build_requests(ctx, host, lane, source, dest, repos, include, exclude) -> tuple[list[StageRequest], int]:
    """(requests, reserve bytes) from either the inventory or the direct-mode options."""
    direct = source is not None or dest is not None or repos
    if direct:
        if host or lane:
            raise SparkfleetError("give either HOST [--lane] or --source/--dest/--repo, not both")
        if source is None or dest is None or not repos:
            raise SparkfleetError("direct mode needs --source, --dest and at least one --repo")
        requests = []
        for spec in repos:
            repo, rev = parse_repo_spec(spec)
            requests.append(StageRequest(source, dest, repo, rev, tuple(include), tuple(exclude)))
        return requests, 0
    if not host:
        raise SparkfleetError("name a HOST (from hosts/fleet.toml) or use --source/--dest/--repo")
    inv = load_inventory(ctx)
    requests = requests_for_host(inv, host, lane)
    if include or exclude:
        requests = [
            StageRequest(
                r.source_hub, r.dest_hub, r.repo, r.revision, r.include + include, r.exclude + exclude
            )
            for r in requests
        ]
    if not requests:
        raise SparkfleetError(f"host {host} has no lane with models to stage")
    return requests, inv.host(host).reserve_bytes


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
    share = _parse_share(share_spec)  # the wave options, refused before any work
    ports = _parse_ports(ports_spec)
    direct = source is not None or dest is not None or bool(repos)
    if not direct and not here and (host or lane):
        inv = load_inventory(ctx)
        known_names(inv, lane, peer_spec)
        if host is None or not remote.is_this_host(inv.host(host)):
            hosts = [host] if host else list(inv.lane(lane).replica_hosts)  # every copy's
            options = remote.StageOptions(
                lane,
                verify_mode,
                jobs,
                reserve_gib,
                wait_seconds,
                include,
                exclude,
                ssh_config,
                peer_transport,
            )
            if dry_run:
                _fleet_dry_run(inv, hosts, options, fanout and host is None, as_json)
                return
            outcomes = _run_fleet(inv, hosts, options, fanout and host is None, as_json)
            if not all(o.ok for o in outcomes):
                sys.exit(max((o.exit_code or ExitCode.SHORTFALL) for o in outcomes if not o.ok))
            return
    # The lanes' pinned kit checkouts ([[launch.trees]]): staged with the models, on the host itself;
    # not by a fan-out share (wave 2 stages them) nor by a host serving its peers.
    on_host = host and not (direct or share_spec or serve_peers)
    kits = kits_for_host(load_inventory(ctx), host, lane) if on_host else []
    requests, reserve = build_requests(ctx, host, lane, source, dest, repos, include, exclude)
    if reserve_gib is not None:
        from ..fleet.inventory import GIB  # lazy, as below: direct mode reads no inventory

        reserve = int(reserve_gib * GIB)
    state_dir = None
    if host:
        from ..fleet.inventory import state_dir_of  # lazy: the inventory is for the fleet, not direct mode

        state_dir = state_dir_of(load_inventory(ctx).host(host))
    if dry_run:
        plans = execute.plan(requests)
        space = execute.space_check(requests, plans, reserve)
        kit_plans = _plan_kits(kits, state_dir)
        if as_json or events:
            echo_json({"dry_run": True, "plans": [p.summary() for p in plans], "space": space,
                       "kits": kit_plans})  # fmt: skip
        else:
            for p in plans:
                click.echo(_plan_line(p.summary()))
            for k in kit_plans:
                click.echo(kit_line(k))
            _print_space(space)
        if not space["ok"]:
            sys.exit(ExitCode.SPACE)  # where the real run would stop before byte one
        return
    peer_transport = resolve_transport(peer_transport, bool(ports_spec))  # the coordinator sends concrete
    secret = sys.stdin.readline().strip() if peer_transport == "rsyncd" and peer_spec else None
    if serve_peers:  # rsyncd fan-out: this host serves its hub until the coordinator closes stdin
        sink = EventsProgress()
        try:
            remote.serve_peers(
                load_inventory(ctx),
                host,
                peer_spec.split(","),
                secret or "",
                lambda p: sink.emit("serving", port=p),
            )
        except SparkfleetError as exc:
            sink.error(exc)
            sys.exit(exc.exit_code)
        return
    stage_models = functools.partial(
        execute.stage, requests, verify_mode=verify_mode, jobs=jobs, reserve_bytes=reserve,
        wait_seconds=wait_seconds, share=share,
    )  # fmt: skip

    def run_stage(progress) -> tuple[execute.StageRun, list[dict]]:
        """Peers checked, kits first (small; a refused pin changes nothing), then the models."""
        peers = (
            remote.peer_sources(
                load_inventory(ctx), peer_spec.split(","), host, ssh_config, peer_transport, ports, secret
            )
            if peer_spec
            else ()
        )
        done = _stage_kits(kits, state_dir, host, wait_seconds=wait_seconds, progress=progress)
        return stage_models(progress=progress, peers=peers), done

    # A fan-out wave's throughput is not the NAS-to-NVMe path's, and a probe would read the NAS
    # once more on every host: the bound is for a plain stage only.
    plain = share is None and not peer_spec

    def bound(run: execute.StageRun, kit_results: list[dict]) -> dict:
        record = with_io_bound(run.as_dict(), requests, state_dir) if plain else run.as_dict()
        return record | {"kits": kit_results}

    if events:
        sink = EventsProgress()
        try:
            run, kit_results = run_stage(progress=sink)
        except SparkfleetError as exc:
            sink.error(exc)
            sys.exit(exc.exit_code)
        sink.result(bound(run, kit_results))
        sys.exit(ExitCode.OK if run.ok else ExitCode.SHORTFALL)
    bar = RichStageProgress() if wants_bar(as_json) else None
    with bar if bar else contextlib.nullcontext():
        run, kit_results = run_stage(progress=bar)
    summary = bound(run, kit_results)
    if as_json:
        echo_json(summary)
    else:
        print_stage_run(summary)
    if not run.ok:
        sys.exit(ExitCode.SHORTFALL)


def with_io_bound(run: dict, requests: list[StageRequest], state_dir: Path | None) -> dict:
    """The run summary plus its throughput as a % of this host's source-read / dest-write bound."""
    from ..roofline.stagebound import staging_bound_of_run

    hubs = sorted({Path(r.source_hub) for r in requests})
    folders = sorted({repo_folder(r.repo) for r in requests})
    run["io_bound"] = staging_bound_of_run(run, hubs, folders, state_dir)
    return run


def known_names(inv: Inventory, lane: str | None, peer_spec: str | None = None) -> None:
    """Refuse a lane or peer the fleet does not have here, before any host is contacted (a host
    told to stage an unknown lane would only say so after the connection)."""
    if lane:
        inv.lane(lane)
    for name in (peer_spec or "").split(","):
        if name:
            inv.host(name)


def _parse_ports(spec: str | None) -> list[int] | None:
    if not spec:
        return None
    try:
        ports = [int(p) for p in spec.split(",")]
    except ValueError:
        raise SparkfleetError(f"--peer-ports takes PORT,PORT,..., got {spec!r}") from None
    if not all(0 < p < 65536 for p in ports):
        raise SparkfleetError(f"--peer-ports {spec}: a port is 1..65535")
    return ports


def _parse_share(spec: str | None) -> tuple[int, int] | None:
    if not spec:
        return None
    try:
        index, count = (int(x) for x in spec.split("/"))
    except ValueError:
        raise SparkfleetError(f"--share takes I/N, got {spec!r}") from None
    if not 0 <= index < count:
        raise SparkfleetError(f"--share {spec}: I must be in 0..N-1")
    return index, count


def _print_space(space: dict, prefix: str = "") -> None:
    line = (
        f"{prefix}space on {space.get('dest', '?')}: need {human_bytes(space['needed'])}, "
        f"free {human_bytes(space.get('free', 0))}, reserve {human_bytes(space['reserve'])}"
    )
    if space["ok"]:
        click.echo(line + ": ok")
    else:
        click.secho(line + ": NOT ENOUGH (the real run would refuse, exit 3)", fg="red")
        if space.get("hint"):
            click.echo(f"{prefix}  hint: {space['hint']}")


def _plan_line(s: dict, prefix: str = "") -> str:
    repair = ""
    if s.get("files_to_repair"):
        repair = f", to repair {s['files_to_repair']} ({human_bytes(s['bytes_to_repair'])}: size differs)"
    unread = s.get("files_to_check", 0) - s.get("files_to_repair", 0)
    check = f", to check {unread}"
    if unread and "bytes_to_check_unread" in s:  # only reading tells: said, never counted as nothing
        most = human_bytes(s["bytes_to_check_unread"])
        check += f" (read in the real run; wrong content is re-copied, up to {most})"
    return (
        f"{prefix}{s['repo']}@{s['commit'][:12]}: {s['entries']} entries, {s['links']} links, "
        f"{s['files']} files ({human_bytes(s['bytes_total'])}), to copy {s['files_to_copy']} "
        f"({human_bytes(s['bytes_to_copy'])}){repair}{check}, "
        f"excluded {s['excluded_entries']} ({human_bytes(s['excluded_bytes'])})"
    )


def kit_line(k: dict, prefix: str = "") -> str:
    """One kit checkout's line: which pinned checkout, from where, and what staging did (or would)."""
    what = {
        "present": "present, left alone",
        "fetched": f"fetched from {k['url']}",
        "replaced": f"replaced ({k['why']}) from {k['url']}; the old one kept at {k['kept']}",
        "fetch": f"would fetch from {k['url']}",
        "replace": f"would replace ({k['why']}) from {k['url']}",
    }[k["state"]]
    return f"{prefix}kit {k['pin']} {k['repo']}@{k['rev'][:10]} at {k['path']}: {what}"


def kit_verdict_line(k: dict, prefix: str = "") -> str:
    """verify's line for one kit checkout: ✓ at the pinned rev, clean, complete; ✗ why, and the fix."""
    from ..fleet.kittrees import KitVerdict

    line = f"{prefix}{'✓' if k['ok'] else '✗'} {KitVerdict(**k).summary()}"
    return line if k["ok"] else f"{line}\n{prefix}  fix: {k['fix']}"


def print_stage_run(run: dict, prefix: str = "") -> None:
    for k in run.get("kits", []):
        click.echo(kit_line(k, prefix))
    for r in run["repos"]:
        peer = f", {human_bytes(r['peer_bytes'])} from peers" if r.get("peer_bytes") else ""
        click.echo(
            f"{prefix}{r['repo']}@{r['commit'][:12]}: copied {r['copied_files']} "
            f"({human_bytes(r['copied_bytes'])}{peer}), reused {r['reused_files']}, "
            f"kept {r['kept_files']} ({human_bytes(r['kept_bytes'])}), repaired {r['repaired_files']}, "
            f"excluded {r['excluded_entries']} ({human_bytes(r['excluded_bytes'])}), "
            f"links {r['links_total']} ({r['links_written']} written)"
        )
        v = r.get("verify")
        if v:
            click.echo(
                f"{prefix}  links ok: {v['links_ok']}, dangling: {v['dangling']}, "
                f"mismatches: {v['mismatches']}, missing: {v['missing']}"
            )
    bound = run.get("io_bound")
    limit = ""
    if bound:
        rates = f"{byte_rate(bound['source_read'])} read, {byte_rate(bound['dest_write'])} write"
        limit = (
            f" = {bound['pct_of_bound']:.0f} % of this host's {bound['binding']} ({rates})"
            if bound.get("pct_of_bound") is not None
            else f"; {bound.get('note') or 'no bound'} ({rates})"
        )
    click.echo(f"{prefix}staged in {run['seconds']:.1f} s, {byte_rate(run['mb_per_s'] * 1e6)}{limit}")


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
            click.echo(_plan_line(p, prefix=f"{h}: "))
        for k in a.get("kits", []):
            click.echo(kit_line(k, prefix=f"{h}: "))
    for h, s in spaces.items():
        _print_space(s, prefix=f"{h}: ")
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
    direct = source is not None or dest is not None or bool(repos)
    if not direct and not here and (host or lane):
        inv = load_inventory(ctx)
        known_names(inv, lane)
        if host is None or not remote.is_this_host(inv.host(host)):
            hosts = [host] if host else list(inv.lane(lane).replica_hosts)  # every copy's
            _verify_fleet(inv, hosts, VerifyOptions(lane, verify_mode, include, exclude, ssh_config), as_json)
            return
    requests, _ = build_requests(ctx, host, lane, source, dest, repos, include, exclude)
    reports = execute.verify(requests, verify_mode)
    kits = []  # the kit checkouts the host's lanes bind ([[launch.trees]]): as stage brings them
    if host and not direct:
        from ..fleet.inventory import state_dir_of  # lazy, as in stage: direct mode reads no inventory
        from ..stage.kits import verify_kits  # lazy, as _plan_kits

        inv = load_inventory(ctx)
        needed = kits_for_host(inv, host, lane)
        kits = [k.as_dict() for k in verify_kits(needed, state_dir_of(inv.host(host)), host, lane)]
    totals = {
        k: sum(getattr(r, k) for r in reports) for k in ("links_ok", "dangling", "mismatches", "missing")
    }
    ok = all(r.ok for r in reports) and all(k["ok"] for k in kits)
    note = verify_note(verify_mode, [r.as_dict() for r in reports])
    if as_json:
        repos_json = [r.as_dict() for r in reports]
        echo_json({"ok": ok, **totals, "mode": verify_mode, "note": note, "repos": repos_json, "kits": kits})
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
    if not ok:
        sys.exit(ExitCode.SHORTFALL)
