"""The `Examples:` of every verb's `--help`, read from the real click tree, parsed as the shell would.

An example is one line of a help's `Examples:` block: optional `NAME=value` assignments, then
`sparkfleet ...`, then an optional `# comment`. Two comments mean something to the tests:

- `# real fleet...`: the example needs the fleet's own hosts (its lanes, a registry, Wake-on-LAN,
  the network); it is parsed and its lanes and hosts must exist in the checkout's fleet, but it is
  not run against the demo;
- `# until Ctrl-C...`: it runs until interrupted (a follow, a supervisor, a server in the
  foreground); the demo run presses Ctrl-C on it after a few seconds.

Every other example runs as written against the demo fleet (`make demo`'s `.demo/`).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from unittest import mock

import click
from clitree import children, walk

from sparkfleet.cli import main

REAL_FLEET = "real fleet"
UNTIL_CTRL_C = "until ctrl-c"


@dataclass(frozen=True)
class Example:
    """One help example: where it is shown, its words, and what its comment says about running it."""

    shown_in: str  # the verb whose --help shows it ("" for `sparkfleet --help`)
    line: str  # as printed
    env: dict[str, str]  # NAME=value assignments before `sparkfleet`
    argv: list[str]  # after `sparkfleet`
    comment: str

    @property
    def real_fleet(self) -> bool:
        return self.comment.lower().startswith(REAL_FLEET)

    @property
    def until_ctrl_c(self) -> bool:
        return UNTIL_CTRL_C in self.comment.lower()

    def __str__(self) -> str:
        return self.line


def example_lines(help_text: str) -> list[str]:
    """The lines of the `Examples:` block (click's `\\b` paragraph after the heading)."""
    if "Examples:" not in help_text:
        return []
    block = help_text.split("Examples:", 1)[1].split("\n\n", 1)[0]
    return [ln.strip() for ln in block.splitlines() if ln.strip()]


def parse_line(shown_in: str, line: str) -> Example:
    code, _, comment = line.partition(" #")
    words = shlex.split(code)
    env = {}
    while words and "=" in words[0] and not words[0].startswith("-"):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if not words or words[0] != "sparkfleet":
        raise ValueError(f"not a sparkfleet command: {line!r}")
    return Example(shown_in, line, env, words[1:], comment.strip())


def all_examples() -> list[Example]:
    """Every example of every visible verb's help, the root's included, in tree order."""
    out = []
    for path, cmd in walk():
        if getattr(cmd, "hidden", False):
            continue
        for line in example_lines(cmd.help or ""):
            out.append(parse_line(" ".join(path), line))
    return out


@dataclass(frozen=True)
class Parsed:
    """An example as click parses it: the verb it runs and its parameters' values."""

    verb: tuple[str, ...]
    params: dict


def parse_with_click(example: Example) -> Parsed:
    """Parse the example with the real commands (raises click.UsageError on an unknown verb, option
    or a missing argument). Values are converted but nothing runs; files need not exist."""
    rest = list(example.argv)
    cmd: click.Command = main
    verb: list[str] = []
    # contexts chained as click chains them: a bare Context would make a command cache a help
    # option without the group's `-h` (context_settings are inherited from the parent)
    parent = click.Context(main, info_name="sparkfleet", resilient_parsing=True, **main.context_settings)
    while isinstance(cmd, click.Group):
        ctx = parent
        if cmd is not main:
            ctx = click.Context(cmd, parent=parent, info_name=cmd.name, resilient_parsing=True)
        _, words, _ = cmd.make_parser(ctx).parse_args(rest)  # a group's options, up to its verb
        if not words:
            raise click.UsageError(f"{example}: names no verb")
        name, rest = words[0], words[1:]
        sub = children(cmd).get(name)
        if sub is None:
            raise click.UsageError(f"{example}: no verb {' '.join([*verb, name])}")
        verb.append(name)
        parent, cmd = ctx, sub
    # the example's own NAME=value, and none of this shell's SPARKFLEET_* (a reader's shell has none)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKFLEET_")} | example.env
    with mock.patch.dict(os.environ, env, clear=True):
        ctx = cmd.make_context(verb[-1], list(rest), parent=parent)
    return Parsed(tuple(verb), dict(ctx.params))
