"""docs/cli.md's verb table and exit-code table, generated from the click tree and errors.EXIT_MEANINGS.

Why generated: a table written by hand left out five verbs the day they were added. The page's
prose (conventions, completion) stays hand-written; only the regions between the markers below
are rewritten, and `tests/cli/test_docs.py` fails when they differ from what the code says.

    python -m sparkfleet.cli.clidoc            # print the page as it should be
    python -m sparkfleet.cli.clidoc --write    # rewrite docs/cli.md's generated regions (atomic)
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import click

from ..base.errors import EXIT_MEANINGS
from ..fleet.schemadoc import emit
from . import COMMANDS
from . import main as sparkfleet

DOC = Path("docs") / "cli.md"
BEGIN = "<!-- BEGIN GENERATED {name}: python -m sparkfleet.cli.clidoc --write; do not edit by hand -->"
END = "<!-- END GENERATED {name} -->"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _summary(cmd: click.Command) -> str:
    """The help's first paragraph: what the verb does, in the verb's own words."""
    first = (cmd.help or "").strip().split("\n\n", 1)[0]
    return _cell(first.replace("\b", ""))


def _arguments(cmd: click.Command) -> str:
    out = []
    for p in cmd.params:
        if isinstance(p, click.Argument):
            name = (p.name or "").upper()
            many = "..." if p.nargs == -1 else ""
            out.append(f"{name}{many}" if p.required else f"[{name}]{many}")
    return " ".join(out)


def _options(cmd: click.Command) -> str:
    names = []
    for p in cmd.params:
        if isinstance(p, click.Option) and not p.hidden:
            names.append("/".join(p.opts + p.secondary_opts))
    return ", ".join(f"`{n}`" for n in names)


def leaves() -> Iterator[tuple[str, click.Command]]:
    """(path, command) of every visible verb, in the order `sparkfleet --help` groups them (COMMANDS),
    a group's subcommands in the order they are defined."""
    ctx = click.Context(sparkfleet, info_name="sparkfleet")
    seen: set[str] = set()

    def walk(path: str, cmd: click.Command) -> Iterator[tuple[str, click.Command]]:
        if getattr(cmd, "hidden", False):
            return
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                yield from walk(f"{path} {name}", sub)
        else:
            yield path, cmd

    for _, name in COMMANDS:
        if name not in seen:
            seen.add(name)
            cmd = sparkfleet.get_command(ctx, name)
            if cmd is not None:
                yield from walk(name, cmd)


def verb_table() -> str:
    lines = ["| verb | what it does | options |", "| --- | --- | --- |"]
    for path, cmd in leaves():
        usage = f"{path} {_arguments(cmd)}".strip()
        lines.append(f"| `{usage}` | {_summary(cmd)} | {_options(cmd)} |")
    return "\n".join(lines)


def exit_table() -> str:
    lines = ["| code | name | meaning |", "| --- | --- | --- |"]
    for code, meaning in EXIT_MEANINGS.items():
        lines.append(f"| {int(code)} | `{code.name}` | {_cell(meaning)} |")
    return "\n".join(lines)


REGIONS = {"verbs": verb_table, "exit-codes": exit_table}


def render(page: str) -> str:
    """`page` with every generated region replaced by what the code says now."""
    for name, make in REGIONS.items():
        begin, end = BEGIN.format(name=name), END.format(name=name)
        pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
        if not pattern.search(page):
            raise ValueError(f"{DOC}: no {begin!r} ... {end!r} region")
        block = f"{begin}\n{make()}\n{end}"
        page = pattern.sub(lambda _m, block=block: block, page)
    return page


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    return emit(DOC, render(DOC.read_text()), args, "python -m sparkfleet.cli.clidoc")


if __name__ == "__main__":
    sys.exit(main())
