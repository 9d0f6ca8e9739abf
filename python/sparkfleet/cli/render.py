"""Rendering records for people (text) and programs (JSON)."""

from __future__ import annotations

import json
from typing import Any

import click

from ..base import units
from ..base.jsonable import to_jsonable


def echo_json(value: Any) -> None:
    click.echo(json.dumps(to_jsonable(value), indent=2, sort_keys=False))


human_bytes = units.human_bytes  # one formatter for every verb (sparkfleet/base/units.py)


def load_inventory(ctx: click.Context):
    """The inventory for this invocation (--root / SPARKFLEET_ROOT / nearest parent)."""
    from ..fleet import inventory

    return inventory.load(ctx.obj.get("root") if ctx.obj else None)


def complete(kind: str):
    """Shell completion for a LANE / HOST / TARGET argument, from the fleet's inventory.

    Completion runs without the group's callback, so the root comes from the parsed --root (or
    SPARKFLEET_ROOT, or the nearest parent); any problem completes nothing rather than failing.
    """

    def names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
        from ..fleet import inventory

        try:
            inv = inventory.load(ctx.find_root().params.get("root"))
        except Exception:  # noqa: BLE001 - completion must never break the shell
            return []
        pool = {"lane": inv.lanes, "host": inv.hosts, "target": [*inv.lanes, *inv.hosts]}[kind]
        return sorted(n for n in pool if n.startswith(incomplete))

    return names
