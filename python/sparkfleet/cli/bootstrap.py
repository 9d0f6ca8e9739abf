"""`sparkfleet bootstrap HOST`: prepare a DGX OS host for `deploy .#HOST` (see sparkfleet.ops.bootstrap)."""

from __future__ import annotations

import sys

import click

from ..base.errors import ExitCode
from .options import JSON
from .render import echo_json, load_inventory


def _absolute_or_empty(value: str) -> str:
    """Every host path bootstrap writes is prefixed with this: a relative one would land wherever
    the remote shell starts."""
    if value and not value.startswith("/"):
        raise click.BadParameter(f"{value!r} is not an absolute directory")
    return value


@click.command("bootstrap")
@click.argument("host")
@click.option("--dry-run", is_flag=True, help="Show every change; make none.")
@click.option(
    "--root-prefix",
    envvar="SPARKFLEET_HOST_ROOT",
    default="",
    hidden=True,
    callback=lambda ctx, param, value: _absolute_or_empty(value),
    help="Treat this directory on the host as / (tests against emulated hosts).",
)
@JSON
@click.pass_context
def bootstrap(ctx: click.Context, host: str, dry_run: bool, root_prefix: str, as_json: bool) -> None:
    """Make HOST deployable: Nix on the ssh PATH, the deploy user trusted, flakes on, sudo finding nix-env.

    \b
    Examples:
      sparkfleet bootstrap dgx2 --dry-run     # real fleet: a DGX OS host
      sparkfleet bootstrap dgx2 --json        # real fleet
    """
    from ..ops.bootstrap import bootstrap as do_bootstrap
    from ..remote.hosts import connect

    inv = load_inventory(ctx)
    h = inv.host(host)

    def show(change) -> None:
        if as_json:
            return
        click.secho(f"{'would' if dry_run else '→'} {change.summary}", bold=True)
        diff = change.diff()
        if diff:
            click.echo(diff.rstrip("\n"))

    runner = connect(h)
    extra = _fleet_ca(runner, root_prefix)
    report = do_bootstrap(
        runner, h.ssh_user, prefix=root_prefix, dry_run=dry_run, on_change=show, extra=extra
    )
    keys = {} if dry_run else _lane_keys(inv, host)
    if as_json:
        echo_json({"ok": report.ok, **vars(report), "changes": [c.shown() for c in report.changes],
                   "api_keys": keys})  # fmt: skip
    else:
        if not report.changes:
            click.echo(f"{host}: nothing to change")
        for p in report.after:
            mark = {True: "✓", False: "✗", None: "–"}[p.ok]
            click.echo(f"{mark} {host:8} {p.name:18} {p.detail}")
            if p.ok is False and p.fix and not dry_run:
                click.echo(f"  {'':8} {'':18} fix: {p.fix}")
        for lane, what in keys.items():
            click.echo(f"{'✓' if not what.startswith('not') else '–'} {host:8} {'API key ' + lane:18} {what}")
    if not report.ok and not dry_run:
        sys.exit(ExitCode.SHORTFALL)


def _lane_keys(inv, host: str) -> dict[str, str]:
    """Each lane on HOST gets its API key there (needs sparkfleet on the host: after `deploy`, the
    launch installs it anyway)."""
    from ..launch.lanekeys import install_for_host
    from ..remote.nodecall import call_agent

    return install_for_host(inv, host, call_agent)


def _fleet_ca(runner, prefix: str) -> list:
    """With $SPARKFLEET_REGISTRY set and a fleet CA made (docs/images.md), trust it on the host."""
    import os

    from ..base.paths import operator_state_dir
    from ..images.registry import read_ca_cert
    from ..ops.bootstrap import trust_changes

    registry = os.environ.get("SPARKFLEET_REGISTRY")
    if not registry:
        return []
    try:
        pem = read_ca_cert(operator_state_dir() / "registry" / "ca" / "ca.crt")
    except FileNotFoundError:
        return []
    return trust_changes(runner, registry, pem, prefix)
