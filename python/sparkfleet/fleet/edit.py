"""Edits to hosts/fleet.toml that keep every comment and every byte nobody asked to change.

`sparkfleet pins` writes resolved commits and digests back into the inventory. Re-serialising the
TOML would drop the comments that carry the fleet's history (why a pin is partial, where it came
from), so edits work on the text: the string value of one key inside one `[pins.NAME]` table is
replaced in place, a missing key is added after the table's last key, new tables are appended.
Every edit is re-parsed and checked to change exactly what it meant to, and the file is replaced
atomically (sparkfleet.base.atomic), so a reader sees the old inventory or the new one, never half.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base import atomic
from ..base.errors import InventoryError

_HEADER = re.compile(r"^\s*\[\[?\s*(?P<name>[^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = r"^(?P<lead>\s*{key}\s*=\s*)(?P<value>\"(?:[^\"\\]|\\.)*\"|'[^']*')(?P<tail>\s*(#.*)?)$"
_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class PinEdit:
    """Set string fields of one pin table (`[pins.<pin>]`)."""

    pin: str
    values: dict[str, str]


def toml_string(value: str) -> str:
    """A TOML basic string (JSON's escapes are valid TOML escapes)."""
    return json.dumps(value, ensure_ascii=False)


def table_key(pin: str) -> str:
    return f"pins.{pin}" if _BARE.match(pin) else f"pins.{toml_string(pin)}"


def _table_span(lines: list[str], pin: str) -> tuple[int, int] | None:
    """Line range [start, end) of the body of `[pins.<pin>]` (the header line is start - 1)."""
    wanted = {f"pins.{pin}", f'pins."{pin}"'}
    start = None
    for i, line in enumerate(lines):
        m = _HEADER.match(line)
        if not m:
            continue
        if start is not None:
            return start, i
        if m.group("name").replace(" ", "") in wanted:
            start = i + 1
    return (start, len(lines)) if start is not None else None


def set_pin_fields(text: str, edit: PinEdit) -> str:
    """Return `text` with the pin's string fields set; other lines are untouched."""
    lines = text.splitlines(keepends=True)
    span = _table_span(lines, edit.pin)
    if span is None:
        raise InventoryError(f"hosts/fleet.toml has no [pins.{edit.pin}] table")
    start, end = span
    for key, value in edit.values.items():
        pattern = re.compile(_KEY.format(key=re.escape(key)))
        for i in range(start, end):
            body = lines[i].rstrip("\r\n")
            m = pattern.match(body)
            if m:
                newline = lines[i][len(body) :]
                lines[i] = f"{m.group('lead')}{toml_string(value)}{m.group('tail')}{newline}"
                break
        else:
            last = max(
                (i for i in range(start, end) if "=" in lines[i] and not lines[i].lstrip().startswith("#")),
                default=start - 1,
            )
            if last >= 0 and not lines[last].endswith("\n"):
                lines[last] += "\n"
            lines.insert(last + 1, f"{key} = {toml_string(value)}\n")
            end += 1
    return "".join(lines)


def append_pins(text: str, heading: str, tables: dict[str, dict[str, str]]) -> str:
    """Return `text` with new `[pins.*]` tables appended under a `# ----` heading (added once)."""
    if not tables:
        return text
    out = text if text.endswith("\n") else text + "\n"
    banner = f"# ---- {heading} "
    if banner not in out:
        out += f"\n{banner}{'-' * max(4, 96 - len(banner))}\n"
    for name, fields in tables.items():
        out += f"\n[{table_key(name)}]\n"
        out += "".join(f"{k} = {toml_string(v)}\n" for k, v in fields.items())
    return out


def check_edit(
    before: str, after: str, edits: list[PinEdit], added: dict[str, dict[str, str]]
) -> dict[str, Any]:
    """Parse `after`, prove it differs from `before` only by `edits` and `added`; return the parsed doc."""
    old, new = tomllib.loads(before), tomllib.loads(after)
    expected = json.loads(json.dumps(old))
    pins = expected.setdefault("pins", {})
    for edit in edits:
        pins[edit.pin].update(edit.values)
    for name, fields in added.items():
        pins[name] = dict(fields)
    if new != expected:
        raise AssertionError("fleet.toml text edit changed more (or less) than the requested pin fields")
    return new


def write(path: Path, text: str) -> bool:
    """Replace the fleet file atomically (temp + fsync + rename); False when nothing changed."""
    return atomic.write_bytes(path, text.encode())
