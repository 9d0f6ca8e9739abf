"""Options that several verbs share, spelled once so that every verb's --help says the same."""

from __future__ import annotations

import click

JSON = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
REPLICA = click.option(
    "--replica",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Which copy of a lane with [gateway] replicas (0: the lane's own hosts; N: replicas[N]).",
)
