"""Walking the real click tree: every verb and option `sparkfleet` has (lazy verbs included)."""

from __future__ import annotations

from collections.abc import Iterator

import click

from sparkfleet.cli import main


def children(group: click.Group) -> dict[str, click.Command]:
    ctx = click.Context(group, info_name=group.name)
    return {name: group.get_command(ctx, name) for name in group.list_commands(ctx)}  # type: ignore[misc]


def walk(
    cmd: click.Command = main, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """(path, command) for the root and every subcommand, depth first."""
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in sorted(children(cmd).items()):
            yield from walk(sub, (*path, name))


def option_names(cmd: click.Command) -> set[str]:
    names: set[str] = set()
    for p in cmd.params:
        if isinstance(p, click.Option):
            names.update(p.opts)
            names.update(p.secondary_opts)
    names.update(["-h", "--help"])
    return names
