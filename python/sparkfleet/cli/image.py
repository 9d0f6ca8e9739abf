"""`sparkfleet image load LANE`: the Nix-built lane image into the engine of every host of the lane."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.progress import DownloadColumn, Progress, TaskID, TextColumn, TimeElapsedColumn, TransferSpeedColumn

from ..base.errors import ExitCode
from .options import JSON, REPLICA, registry_options
from .progress import wants_bar
from .render import echo_json, load_inventory
from .values import POSITIVE_SECONDS


@click.group("image")
def image() -> None:
    """Load the lane image built by Nix into docker/podman on the lane's hosts, and record its ID."""


@image.command("load")
@click.argument("lane")
@click.option(
    "--image",
    "source",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("result"),
    show_default=True,
    help="The `nix build .#<package>` result (a stream script) or a docker-archive tar.",
)
@click.option("--dry-run", is_flag=True, help="Show what each host would load; change nothing.")
@click.option("--timeout", type=POSITIVE_SECONDS, default=3600.0, show_default=True,
              help="Seconds per host load.")  # fmt: skip
@click.option(
    "--jobs", type=click.IntRange(min=1), default=4, show_default=True, help="Hosts loading at once."
)
@REPLICA
@JSON
@click.pass_context
def load(
    ctx: click.Context, lane: str, source: Path, dry_run: bool, timeout: float, jobs: int, replica: int,
    as_json: bool,
) -> None:
    """Load the built image into every host of LANE; hosts already holding it are left alone.

    \b
    Examples:
      sparkfleet image load dsv41-flash-4x-mia --image ./result    # real fleet: after nix build
      sparkfleet image load dsv41-flash-4x-aiden --dry-run --json   # real fleet
    """
    from ..images.load import load as do_load
    from ..lane.recipe import launch_recipe
    from ..lane.replicas import replica_inventory

    def event(msg: str) -> None:
        if not as_json:
            click.echo(f"· {msg}", err=True)

    inv = replica_inventory(load_inventory(ctx), lane, replica)
    image = launch_recipe(inv, lane)  # the lane's image facts: its engine and flake package
    if wants_bar(as_json):
        bar = Progress(
            TextColumn("{task.description}"), DownloadColumn(binary_units=True), TransferSpeedColumn(),
            TimeElapsedColumn(), console=Console(stderr=True),
        )  # fmt: skip
        tasks: dict[str, TaskID] = {}

        def count(host: str, n: int) -> None:  # the archive's length is known only at its end
            if host not in tasks:
                tasks[host] = bar.add_task(f"{host}: load", total=None)
            bar.advance(tasks[host], n)

        with bar:
            report = do_load(inv, image, source, dry_run=dry_run, timeout_s=timeout, on_event=event,
                             on_bytes=count, jobs=jobs)  # fmt: skip
    else:
        report = do_load(inv, image, source, dry_run=dry_run, timeout_s=timeout, on_event=event, jobs=jobs)
    if as_json:
        echo_json({"ok": report.ok, **vars(report)})
    else:
        for h in report.hosts:
            mark = "✓" if h.action in ("unchanged", "loaded") else ("→" if h.action == "load" else "✗")
            what = h.image_id or h.detail
            prev = f" (previous {h.previous_image_id[:19]}…)" if h.previous_image_id else ""
            click.echo(f"{mark} {h.host:8} {h.action:9} {what}{prev}")
        if report.record:
            click.echo(f"recorded in {report.record}")
        if dry_run:
            click.echo("dry run: nothing loaded")
    if not report.ok:
        sys.exit(ExitCode.SHORTFALL)


@image.command("push")
@click.argument("lane")
@click.option(
    "--image", "source", type=click.Path(dir_okay=False, path_type=Path), default=Path("result"),
    show_default=True, help="The `nix build .#<package>` result (a stream script) or a docker-archive tar.",
)  # fmt: skip
@registry_options
@JSON
@click.pass_context
def push(
    ctx: click.Context, lane: str, source: Path, address: str, cert_dir: Path | None, push_auth: Path | None,
    as_json: bool,
) -> None:  # fmt: skip
    """Copy LANE's built image into the fleet registry (skopeo, by digest) and record the digest.

    The copy goes to the push address with the push login (--push-auth); hosts later pull the
    digest from --registry, where no login is needed.

    \b
    Examples:
      sparkfleet image push dsv41-flash-4x-mia --image ./result --registry 10.0.0.1:5000   # real fleet
      SPARKFLEET_REGISTRY=10.0.0.1:5000 sparkfleet image push dsv41-flash-exl3-2x --json   # real fleet
    """
    from ..images.operator_registry import open_registry
    from ..images.push import push_lane

    rec = push_lane(load_inventory(ctx), lane, source, open_registry(address, cert_dir, push_auth))
    if as_json:
        echo_json(rec)
    else:
        click.echo(f"{lane}: {rec['image_id']} is {rec['registry']}/{rec['repo']}@{rec['digest']}")
