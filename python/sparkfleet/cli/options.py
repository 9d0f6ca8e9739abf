"""Options more than one verb takes: declared once, so that their names, help and checks agree."""

from __future__ import annotations

from pathlib import Path

import click

from ..base.paths import GATEWAY_STATE_ENV
from .values import WRITABLE_DIR

JSON = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
REPLICA = click.option(
    "--replica",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Which copy of a lane with [gateway] replicas (0: the lane's own hosts; N: replicas[N]).",
)


def state_option(writes: bool):
    """--state-dir: a folder the verb writes into (refused unless it can be), or, for a verb that
    only reads it, one that exists (a mistyped state dir is not a gateway "not running")."""
    return click.option(
        "--state-dir",
        type=WRITABLE_DIR if writes else click.Path(exists=True, file_okay=False, path_type=Path),
        envvar=GATEWAY_STATE_ENV,
        show_envvar=True,
        default=None,
        show_default="$SPARKFLEET_STATE_DIR/gateway",
        help="The gateway's key (0600), config, record and log.",
    )


WRITES_STATE, READS_STATE = state_option(writes=True), state_option(writes=False)


def registry_options(fn):
    """--registry HOST:PORT, --cert-dir (the fleet CA) and --push-auth (the push login), shared by
    `image push` and `release cut`. A cert dir or login that is named must be there: one that is
    not was otherwise noticed only after the generation and the push record were read."""
    fn = click.option(
        "--push-auth", type=click.Path(exists=True, dir_okay=False, path_type=Path),
        envvar="SPARKFLEET_REGISTRY_AUTH",
        show_envvar=True, default=None, show_default="$SPARKFLEET_STATE_DIR/registry/push-auth.json",
        help="The push login `registry init` wrote (0600; it names the push address too).",
    )(fn)  # fmt: skip
    fn = click.option(
        "--cert-dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
        envvar="SPARKFLEET_REGISTRY_CERTS",
        show_envvar=True, default=None, show_default="$SPARKFLEET_STATE_DIR/registry/ca",
        help="Directory holding the fleet CA (ca.crt) the registry's certificate is signed by.",
    )(fn)  # fmt: skip
    return click.option(
        "--registry", "address", envvar="SPARKFLEET_REGISTRY", show_envvar=True, required=True,
        help="The fleet registry hosts pull from, HOST:PORT (docs/images.md).",
    )(fn)  # fmt: skip
