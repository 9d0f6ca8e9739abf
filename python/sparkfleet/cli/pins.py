"""`sparkfleet pins resolve|verify|import-manifest|import-lock`."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import click

from .. import pins as core
from ..base.errors import ExitCode
from .options import JSON
from .render import echo_json, load_inventory

_MARK = {
    "resolved": "✓",
    "unchanged": "✓",
    "ok": "✓",
    "drift": "✗",
    "unresolved": "✗",
    "unreachable": "✗",
}


def registry_url(value: str | None) -> str | None:
    """An http(s) base URL. Anything else would reach urllib as a URL it cannot open (a traceback)."""
    if not value:
        return None
    if not re.fullmatch(r"https?://[A-Za-z0-9.\[\]:-]+(/\S*)?", value):
        raise click.BadParameter(f"{value!r} is not a registry base URL (https://HOST[:PORT])")
    return value


@click.group()
@click.option(
    "--git-base",
    envvar="SPARKFLEET_GIT_BASE",
    default=core.Endpoints.git_base,
    show_default=True,
    help="Base URL git repos are fetched from (<base>/<org>/<name>).",
)
@click.option(
    "--registry",
    # not $SPARKFLEET_REGISTRY: that is the fleet's own registry (HOST:PORT, docs/images.md), which
    # holds the images sparkfleet built, not the upstream images the pins name
    envvar="SPARKFLEET_PINS_REGISTRY",
    default=None,
    show_default="from the image name; Docker Hub for org/name",
    callback=lambda ctx, param, value: registry_url(value),
    help="Registry base URL for every image (a mirror).",
)
@click.option(
    "--hf-endpoint",
    envvar="HF_ENDPOINT",
    default=core.Endpoints.hf,
    show_default=True,
    help="Hugging Face endpoint for revision lookups.",
)
@click.pass_context
def pins(ctx: click.Context, git_base: str, registry: str | None, hf_endpoint: str) -> None:
    """Resolve, verify and import the pinned sources in hosts/fleet.toml."""
    ctx.obj = {**(ctx.obj or {}), "endpoints": core.Endpoints(git_base, registry or None, hf_endpoint)}


def _render(report: core.PinReport, as_json: bool) -> None:
    if as_json:
        echo_json(
            {
                "action": report.action,
                "ok": report.ok,
                "written": report.written,
                "fleet_file": report.fleet_file,
                "pins": report.pins,
            }
        )
    else:
        for state in report.pins:
            now = f" -> {state.current}" if state.current and state.current != state.recorded else ""
            click.echo(
                f"{_MARK[state.status]} {state.name} ({state.kind} {state.source}) "
                f"{state.recorded}{now}: {state.status}" + (f" — {state.detail}" if state.detail else "")
            )
            if state.nix_hash and state.nix_hash != state.recorded_nix_hash:
                click.echo(f"    nix_hash {state.nix_hash}")
        if report.written:
            click.echo(f"wrote {report.fleet_file}")
    if not report.ok:
        bad = ", ".join(s.name for s in report.pins if not s.ok)
        click.secho(f"{report.action}: not ok: {bad}", fg="red", err=True)
        unreachable = any(s.status == "unreachable" for s in report.pins if not s.ok)
        sys.exit(ExitCode.UNREACHABLE if unreachable else ExitCode.SHORTFALL)


@pins.command("resolve")
@click.argument("names", nargs=-1)
@click.option("--dry-run", is_flag=True, help="Ask the sources, print what would change, write nothing.")
@click.option(
    "--no-nix-hash", is_flag=True, help="Skip the Nix fixed-output hashes (no clone archive / image pull)."
)
@JSON
@click.pass_context
def resolve(
    ctx: click.Context, names: tuple[str, ...], dry_run: bool, no_nix_hash: bool, as_json: bool
) -> None:
    """Fill in full commits, digests and Nix hashes for NAMES (default: every pin); keeps comments.

    \b
    Examples:
      sparkfleet pins resolve --dry-run          # real fleet: asks git, Hugging Face, registries
      sparkfleet pins resolve mia-tp4 --json     # real fleet
    """
    report = core.resolve(
        load_inventory(ctx),
        names,
        endpoints=ctx.obj["endpoints"],
        dry_run=dry_run,
        with_nix_hash=not no_nix_hash,
    )
    _render(report, as_json)


@pins.command("verify")
@click.argument("names", nargs=-1)
@JSON
@click.pass_context
def verify(ctx: click.Context, names: tuple[str, ...], as_json: bool) -> None:
    """Check NAMES (default: all pins) with their sources; fails closed on drift, partial pins, no network.

    \b
    Examples:
      sparkfleet pins verify                     # real fleet: asks each pin's source
      sparkfleet pins verify dsv41-flash --json  # real fleet
    """
    _render(core.verify(load_inventory(ctx), names, endpoints=ctx.obj["endpoints"]), as_json)


@pins.command("import-manifest")
@click.argument("manifest", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--from", "from_pin", required=True, help="The git pin whose runtime/sources.manifest this is.")
@click.option("--prefix", default=None, show_default="<from>-src-", help="Pin name prefix.")
@click.option("--dry-run", is_flag=True, help="Print what would change, write nothing.")
@JSON
@click.pass_context
def import_manifest(
    ctx: click.Context, manifest: Path, from_pin: str, prefix: str | None, dry_run: bool, as_json: bool
) -> None:
    """Turn each url row of MANIFEST into a url pin (component, commit, sha256, url) in hosts/fleet.toml.

    \b
    Examples:
      sparkfleet pins import-manifest runtime/sources.manifest --from mia-tp4 --dry-run   # real fleet
    """
    report = core.import_manifest(
        load_inventory(ctx), manifest, from_pin=from_pin, prefix=prefix, dry_run=dry_run
    )
    if as_json:
        echo_json(report)
        return
    for label, names in (
        ("added", report.added),
        ("updated", report.updated),
        ("unchanged", report.unchanged),
        ("stale (no longer listed; left in place)", report.stale),
    ):
        if names:
            click.echo(f"{label}: {', '.join(names)}")
    if report.local_files:
        click.echo(
            f"{len(report.local_files)} local file(s) ship inside {from_pin} itself (covered by its git pin)"
        )
    click.echo("wrote hosts/fleet.toml" if report.written else "hosts/fleet.toml unchanged")


@pins.command("import-lock")
@click.argument("lock", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--from", "from_pin", required=True, help="The kit's git pin whose recipe-lock.json this is.")
@click.option("--at", default=None, help="The full kit commit LOCK was read at (extends the pin's rev).")
@click.option("--dry-run", is_flag=True, help="Print what would change, write nothing.")
@JSON
@click.pass_context
def import_lock(
    ctx: click.Context, lock: Path, from_pin: str, at: str | None, dry_run: bool, as_json: bool
) -> None:
    """Set the commits and image digest the kit's recipe-lock.json pins on the pins of the same sources.

    \b
    Examples:
      sparkfleet pins import-lock recipe-lock.json --from exl3-kit --dry-run   # real fleet: the kit's lock
      sparkfleet pins import-lock recipe-lock.json --from exl3-kit             # real fleet
    """
    report = core.import_lock(load_inventory(ctx), lock, from_pin=from_pin, at=at, dry_run=dry_run)
    if as_json:
        echo_json(report)
        return
    for name, fields in report.updated.items():
        click.echo(
            f"{'would set' if dry_run else 'set'} {name}: "
            + ", ".join(f"{k} = {v}" for k, v in fields.items())
        )
    if report.unchanged:
        click.echo(f"unchanged: {', '.join(report.unchanged)}")
    for line in report.unmatched:
        click.echo(f"no pin names {line}")
    for line in report.not_imported:
        click.echo(f"not imported: {line}")
    click.echo("wrote hosts/fleet.toml" if report.written else "hosts/fleet.toml unchanged")
