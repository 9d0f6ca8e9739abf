"""`sparkfleet stage` and `sparkfleet verify`: NAS hub cache → node-local NVMe, verified."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click

from ..errors import SparkfleetError
from ..hubcache import parse_repo_spec
from ..inventory import GIB
from ..stage import execute
from ..stage.plan import StageRequest
from ..stage.targets import requests_for_host
from .progress import RichStageProgress, wants_bar
from .render import echo_json, human_bytes, load_inventory


def selectors(fn):
    """The options `stage` and `verify` share: a HOST (+ --lane) from the inventory, or direct mode."""
    options = [
        click.argument("host", required=False),
        click.option("--lane", help="Only this lane's repos (default: every lane on HOST)."),
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
            "--verify",
            "verify_mode",
            type=click.Choice(["sample", "full"]),
            default="sample",
            show_default=True,
            help="sample: size + head/tail/spread windows; full: every byte (content address where named).",
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
    "--dry-run", is_flag=True, help="Print the plan (bytes per repo, excluded bytes, links); write nothing."
)
@click.option(
    "--jobs", default=4, show_default=True, type=click.IntRange(1, 64), help="Parallel copy workers."
)
@click.option(
    "--reserve-gib",
    type=float,
    help="Free space to leave (default: the host's reserve_gib; 0 in direct mode).",
)
@click.option(
    "--wait", "wait_seconds", default=0.0, type=float, help="Wait this long for another stage run's lock."
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
) -> None:
    """Stage the repos HOST's lanes need from its NAS hub to its local hub (run on HOST)."""
    requests, reserve = build_requests(ctx, host, lane, source, dest, repos, include, exclude)
    if reserve_gib is not None:
        reserve = int(reserve_gib * GIB)
    if dry_run:
        plans = execute.plan(requests)
        if as_json:
            echo_json({"dry_run": True, "plans": [p.summary() for p in plans]})
            return
        for p in plans:
            s = p.summary()
            click.echo(
                f"{s['repo']}@{s['commit'][:12]}: {s['entries']} entries, {s['links']} links, "
                f"{s['files']} files ({human_bytes(s['bytes_total'])}), to copy {s['files_to_copy']} "
                f"({human_bytes(s['bytes_to_copy'])}), to check {s['files_to_check']}, "
                f"excluded {s['excluded_entries']} ({human_bytes(s['excluded_bytes'])})"
            )
        return
    bar = RichStageProgress() if wants_bar(as_json) else None
    with bar if bar else contextlib.nullcontext():
        run = execute.stage(
            requests,
            verify_mode=verify_mode,
            jobs=jobs,
            reserve_bytes=reserve,
            wait_seconds=wait_seconds,
            progress=bar,
        )
    if as_json:
        echo_json(run.as_dict())
    else:
        for r in run.results:
            click.echo(
                f"{r.repo}@{r.commit[:12]}: copied {r.copied_files} ({human_bytes(r.copied_bytes)}), "
                f"reused {r.reused_files}, kept {r.kept_files} ({human_bytes(r.kept_bytes)}), "
                f"repaired {r.repaired_files}, "
                f"excluded {r.excluded_entries} ({human_bytes(r.excluded_bytes)}), "
                f"links {r.links_total} ({r.links_written} written)"
            )
            if r.verify:
                click.echo(f"  {r.verify.line()}, missing: {r.verify.missing}")
        click.echo(f"staged in {run.seconds:.1f} s, {run.mb_per_s:.1f} MB/s")
    if not run.ok:
        sys.exit(1)


@click.command()
@selectors
@click.pass_context
def verify(ctx, host, lane, source, dest, repos, include, exclude, verify_mode, as_json) -> None:
    """Check the local tree against the source; change nothing. Exit 0 only if complete and correct."""
    requests, _ = build_requests(ctx, host, lane, source, dest, repos, include, exclude)
    reports = execute.verify(requests, verify_mode)
    totals = {
        k: sum(getattr(r, k) for r in reports) for k in ("links_ok", "dangling", "mismatches", "missing")
    }
    ok = all(r.ok for r in reports)
    if as_json:
        echo_json({"ok": ok, **totals, "repos": [r.as_dict() for r in reports]})
    else:
        for r in reports:
            click.echo(f"{r.repo}@{r.commit[:12]}: {r.line()}, missing: {r.missing}")
            for problem in r.problems[:20]:
                click.echo(f"  {problem}")
        click.echo(
            f"links ok: {totals['links_ok']}, dangling: {totals['dangling']}, "
            f"mismatches: {totals['mismatches']}, missing: {totals['missing']}"
        )
    if not ok:
        sys.exit(1)
