"""`sparkfleet registry init`: the fleet CA, the registry's certificate and its config.yml."""

from __future__ import annotations

from pathlib import Path

import click

from .render import echo_json


@click.group("registry")
def registry() -> None:
    """The fleet registry (Debian's docker-registry, TLS from the fleet CA) on the head host."""


@registry.command("init")
@click.option("--address", envvar="SPARKFLEET_REGISTRY", show_envvar=True, required=True,
              help="HOST:PORT the hosts reach the registry at (the head's fabric address).")  # fmt: skip
@click.option("--storage", type=click.Path(file_okay=False, path_type=Path),
              default=Path("/var/lib/docker-registry"), show_default=True,
              help="Where the registry keeps blobs.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def init(address: str, storage: Path, as_json: bool) -> None:
    """Make the fleet CA (once), a certificate for ADDRESS and the registry's config.yml.

    Then run `docker-registry serve <config>` on the head host, and `sparkfleet bootstrap HOST`
    (with SPARKFLEET_REGISTRY set) on every host so docker and podman trust the CA.

    \b
    Examples:
      sparkfleet registry init --address 10.0.0.1:5000
      SPARKFLEET_REGISTRY=10.0.0.1:5000 sparkfleet registry init --json
    """
    from ..images.record import operator_state_dir
    from ..images.registry import init as do_init

    out = do_init(operator_state_dir(), address, storage)
    if as_json:
        echo_json(out)
    else:
        click.echo(
            f"fleet CA {out['ca']}\nregistry config {out['config']}: docker-registry serve {out['config']}"
        )


@registry.command("serve")
def serve() -> None:
    """Run the registry in the foreground (what the sparkfleet-registry unit runs).

    It serves the config.yml `registry init` wrote under the same state dir ($SPARKFLEET_STATE_DIR).

    \b
    Examples:
      SPARKFLEET_STATE_DIR=/var/lib/sparkfleet sparkfleet registry serve
    """
    import os

    from ..images.record import operator_state_dir
    from ..images.registry import serve_argv

    argv = serve_argv(operator_state_dir())
    click.echo(f"· {' '.join(argv)}", err=True)
    os.execv(argv[0], argv)
