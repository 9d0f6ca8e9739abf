"""The `sparkfleet` command line: one thin click command per verb.

Commands parse arguments, call a core function, and render the record it returns (text or
`--json`). They hold no logic of their own. A `SparkfleetError` is printed without a
traceback and becomes the exit code.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click

from .. import __version__
from ..errors import SparkfleetError

# (module under sparkfleet.cli, verb): each verb is the module attribute of the same name.
COMMANDS: list[tuple[str, str]] = [
    ("inventory", "inventory"),
    ("pins", "pins"),
    ("stage", "stage"),
    ("stage", "verify"),
    ("demo", "demo"),
    ("launch", "env"), ("launch", "manifest"), ("launch", "launch"), ("launch", "stop"),
    ("launch", "status"), ("launch", "logs"), ("launch", "doctor"), ("launch", "agent"),
    ("bench", "smoke"), ("bench", "bench"), ("bench", "report"),
    ("engram", "engram"),
]


class FleetGroup(click.Group):
    """A click group that turns SparkfleetError into a clean message and exit code.

    Verbs are imported when they are called, not at start-up: a node-side `sparkfleet agent`
    call (one per readiness poll) should not pay for importing the bench's plotting stack.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *(name for _, name in COMMANDS)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        for module, name in COMMANDS:
            if name == cmd_name:
                return getattr(importlib.import_module(f".{module}", __name__), name)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except SparkfleetError as exc:
            click.secho(f"error: {exc.message}", fg="red", err=True)
            if exc.hint:
                click.echo(f"  hint: {exc.hint}", err=True)
            sys.exit(exc.exit_code)


@click.group(cls=FleetGroup)
@click.version_option(__version__, prog_name="sparkfleet")
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="SPARKFLEET_ROOT",
    help="Fleet root holding hosts/fleet.toml and recipes/ (default: nearest parent of the cwd).",
)
@click.pass_context
def main(ctx: click.Context, root: Path | None) -> None:
    """Stage, launch and bench DeepSeek-V4.1-Flash lanes on a DGX Spark fleet."""
    ctx.obj = {"root": root}



