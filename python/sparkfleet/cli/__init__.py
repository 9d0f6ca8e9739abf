"""The `sparkfleet` command line: one thin click command per verb.

Commands parse arguments, call a core function, and render the record it returns (text or
`--json`). They hold no logic of their own. A `SparkfleetError` is printed without a
traceback and becomes the exit code (sparkfleet.base.errors.ExitCode); with `--json` it is printed
as a JSON object on stdout instead, so a script piping `--json` never reads an empty document.

Conventions every verb gets from the group: `-h`/`--help`, defaults shown as `[default: …]`,
`NO_COLOR` honoured, `-v` (show each command sent to a host; `-vv` more) and `-q` (no progress
bars or step lines: only results and errors).
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import os
import sys
from pathlib import Path

import click

from .. import __version__
from ..base.errors import ExitCode, SparkfleetError, from_os_error

# (module under sparkfleet.cli, verb): each verb is the module attribute of the same name.
COMMANDS: list[tuple[str, str]] = [
    ("inventory", "inventory"),
    ("pins", "pins"),
    ("stage", "stage"),
    ("stage", "verify"),
    ("demo", "demo"),
    ("launch", "env"), ("launch", "manifest"), ("launch", "launch"), ("lanestate", "stop"),
    ("lanestate", "status"), ("lanestate", "logs"), ("launch", "doctor"), ("launch", "agent"),
    ("bench", "smoke"), ("bench", "bench"), ("report", "report"),
    ("engram", "engram"),
    ("roofline", "roofline"), ("roofline", "measure"),
    ("image", "image"),
    ("bootstrap", "bootstrap"),
    ("power", "power"),
    ("keys", "keys"),
    ("gateway", "gateway"),
    ("release", "release"),
    ("registry", "registry"),
    ("view", "view"),
    ("generations", "watch"), ("generations", "promote"), ("generations", "rollback"),
    ("generations", "history"),
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

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # Remember whether the verb was asked for --json before any of its parsing can fail.
        before_dashdash = args[: args.index("--")] if "--" in args else args
        ctx.meta["sparkfleet.json"] = "--json" in before_dashdash
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        as_json = ctx.meta.get("sparkfleet.json", False)
        try:
            return super().invoke(ctx)
        except SparkfleetError as exc:
            report_error(exc.message, exc.hint, int(exc.exit_code), as_json)
        except OSError as exc:  # a full disk, a read-only mount, a vanished NAS: the operator's to fix
            err = from_os_error(exc, f"sparkfleet {ctx.invoked_subcommand or ''}".strip())
            if err is None:
                raise
            report_error(err.message, err.hint, int(err.exit_code), as_json)
        except click.UsageError as exc:
            if not as_json:
                raise
            hint = f"{exc.ctx.command_path} --help" if exc.ctx else "sparkfleet --help"
            report_error(exc.format_message(), hint, int(ExitCode.USAGE), True)
        except KeyboardInterrupt:
            report_error("interrupted", None, int(ExitCode.INTERRUPTED), as_json)


def report_error(message: str, hint: str | None, code: int, as_json: bool) -> None:
    """Print a user-facing error (text on stderr, or a JSON object on stdout) and exit with `code`."""
    if as_json:
        click.echo(json.dumps({"error": message, "hint": hint, "code": code}, indent=2))
    else:
        click.secho(f"error: {message}", fg="red", err=True)
        if hint:
            click.echo(f"  hint: {hint}", err=True)
    sys.exit(code)


CONTEXT = {"help_option_names": ["-h", "--help"], "show_default": True, "max_content_width": 100}


@click.group(cls=FleetGroup, context_settings=CONTEXT)
@click.version_option(__version__, prog_name="sparkfleet")
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="SPARKFLEET_ROOT",
    show_envvar=True,
    show_default="nearest parent of the cwd with hosts/fleet.toml",
    help="Fleet root holding hosts/fleet.toml and recipes/.",
)
@click.option("-v", "--verbose", count=True, help="Show each command sent to a host (-vv: more).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars or step lines: results and errors only.")
@click.pass_context
def main(ctx: click.Context, root: Path | None, verbose: int, quiet: bool) -> None:
    """Stage, launch and bench DeepSeek-V4.1-Flash lanes on a DGX Spark fleet.

    Every verb's examples name the demo's lane and hosts: after `make demo`, in the checkout, each
    runs as written. One marked `# real fleet` needs the fleet's own hosts, registry or network.

    \b
    Examples:
      sparkfleet --root .demo/fleet doctor demo-exl3-2x
      SPARKFLEET_ROOT=.demo/fleet sparkfleet status demo-exl3-2x --json
      sparkfleet stage --lane demo-exl3-2x --dry-run
      sparkfleet launch dsv41-flash-exl3-2x --dry-run     # real fleet: a lane of the checkout

    Shell completion: docs/cli.md "Shell completion".
    """
    if os.environ.get("NO_COLOR"):  # https://no-color.org: any non-empty value
        ctx.color = False
    ctx.obj = {"root": root, "verbose": verbose, "quiet": quiet}
    if verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger = logging.getLogger("sparkfleet")
        logger.addHandler(handler)
        logger.setLevel(logging.INFO if verbose == 1 else logging.DEBUG)


main.help = (
    inspect.cleandoc(main.help or "")  # dedented first: click dedents by the least-indented line
    + "\n\nExit codes: "
    + ", ".join(f"{int(code)} {code.name.lower()}" for code in ExitCode)
    + "."
)
