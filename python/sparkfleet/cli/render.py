"""Rendering records for people (text) and programs (JSON)."""

from __future__ import annotations

import dataclasses
import enum
import json
from pathlib import Path
from typing import Any

import click


def to_jsonable(value: Any) -> Any:
    """Dataclasses, paths, enums, tuples and sets → plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value) if f.repr}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = [to_jsonable(v) for v in value]
        return sorted(items, key=str) if isinstance(value, set | frozenset) else items
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    return value


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
