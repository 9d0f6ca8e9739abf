"""`sparkfleet release cut LANE NAME`: freeze a promoted generation as a named, immutable release."""

from __future__ import annotations

from pathlib import Path

import click

from .options import JSON, registry_options
from .render import echo_json, load_inventory


@click.group("release")
def release() -> None:
    """Named releases of promoted generations (image digest, pins, recipe, fingerprints, reports)."""


@release.command("cut")
@click.argument("lane")
@click.argument("name")
@click.option("--generation", default=None, show_default="the newest promoted one", help="Generation id.")
@registry_options
@JSON
@click.pass_context
def cut(
    ctx: click.Context, lane: str, name: str, generation: str | None, address: str, cert_dir: Path | None,
    push_auth: Path | None, as_json: bool,
) -> None:  # fmt: skip
    """Freeze LANE's promoted generation as release NAME: recorded once, tagged NAME in the registry.

    A release is never overwritten, and a generation that was never promoted is refused.

    \b
    Examples:
      sparkfleet release cut dsv41-flash-4x-mia r39 --registry 10.0.0.1:5000   # real fleet
      SPARKFLEET_REGISTRY=10.0.0.1:5000 sparkfleet release cut dsv41-flash-4x-mia r40 --json   # real fleet
    """
    from ..images.operator_registry import open_registry
    from ..launch.release import cut as do_cut

    inv = load_inventory(ctx)
    rel = do_cut(inv.root, lane, name, open_registry(address, cert_dir, push_auth), generation)
    if as_json:
        echo_json({k: v for k, v in rel.items() if k not in ("recipe_text", "fleet_text")})
    else:
        img = rel["image"]
        click.echo(f"release {name} of {lane}: generation {rel['generation']}, "
                   f"{img['registry']}/{img['repo']}@{img['digest']} (tag {name})")  # fmt: skip
