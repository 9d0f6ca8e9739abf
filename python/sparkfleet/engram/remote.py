"""`engram pack LANE HOST` from anywhere: the packing runs on HOST, like `stage HOST` does.

Why: a pack reads ~47 GiB of a rank's rows from HOST's staged shards and writes them to HOST's
NVMe. Run on the operator's machine it read the wrong hubs (the operator's paths) or, worse,
pulled the rows across the LAN. So a HOST that is not this machine gets `sparkfleet --root R
engram pack LANE HOST --here --json` over ssh (the deployed sparkfleet and fleet root, exactly as
stage.remote starts `stage HOST --here --events`), and its JSON answer is the result.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..base.errors import SparkfleetError
from ..fleet.inventory import Inventory
from ..remote.deployed import not_deployed, remote_root
from ..remote.hosts import check_reachable, connect
from ..stage.remote import sparkfleet_argv


def pack_argv(
    prefix: list[str], root: Path, lane: str, host: str, force: bool, full: bool, reserve_gib: float | None
) -> list[str]:
    """The argv that packs HOST's rows on HOST and answers one JSON document (pure; tested)."""
    argv = [*prefix, "--root", str(root), "engram", "pack", lane, host, "--here", "--json"]
    if force:
        argv.append("--force")
    if full:
        argv.append("--full")
    if reserve_gib is not None:
        argv += ["--reserve-gib", str(reserve_gib)]
    return argv


def pack_on_host(
    inv: Inventory,
    lane: str,
    host: str,
    force: bool = False,
    full: bool = False,
    reserve_gib: float | None = None,
    runner=None,
) -> dict[str, Any]:
    """Run the pack on `host` (over ssh, or `runner`) and return its result document."""
    runner = runner or connect(inv.host(host))
    argv = pack_argv(
        sparkfleet_argv(runner), remote_root(inv.root.resolve()), lane, host, force, full, reserve_gib
    )
    res = check_reachable(runner.run(argv))
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
    try:
        doc = json.loads("\n".join(lines)) if lines else None
    except ValueError:
        doc = None
    if res.returncode == 0 and isinstance(doc, dict):
        return doc
    err_lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    missing = not_deployed(host, argv[0], [*err_lines, *lines], remote_root(inv.root.resolve()))
    if missing is not None:
        raise missing
    message = next((ln.removeprefix("error: ") for ln in err_lines if ln.startswith("error: ")), None)
    hint = next(
        (ln.strip().removeprefix("hint: ") for ln in err_lines if ln.strip().startswith("hint: ")), None
    )
    raise SparkfleetError(
        f"{host}: engram pack {lane} failed there (exit {res.returncode}): "
        + (message or (err_lines[-1] if err_lines else "no output")),
        hint=hint,
        exit_code=res.returncode if res.returncode else None,
    )
