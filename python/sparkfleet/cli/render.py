"""Rendering records for people (text) and programs (JSON)."""

from __future__ import annotations

import json
from typing import Any

import click

from ..jsonable import to_jsonable


def echo_json(value: Any) -> None:
    click.echo(json.dumps(to_jsonable(value), indent=2, sort_keys=False))


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def load_inventory(ctx: click.Context):
    """The inventory for this invocation (--root / SPARKFLEET_ROOT / nearest parent)."""
    from .. import inventory

    return inventory.load(ctx.obj.get("root") if ctx.obj else None)
