"""What a generation record (recipes/<lane>/generations/<id>.json) must hold before anything reads it.

Why one table of every field: the records are files anyone with the fleet checkout can edit, and
each reader takes a different part of them apart — `history` formats the boot's cache kind and
seconds, `release cut` walks `image_ids`, `status` and `watch` read each host's NAS-weights note,
the next launch compares its boot with the last one's, `promote` and `rollback` act on the rest.
A field the validator let through with a shape no reader expects was a traceback in that reader
(a boot `{"cache": null}` in history; `"image_ids": [...]` in release cut). So every field any
reader reads is checked here, once, and a record that fails is skipped or refused by `scan`,
naming the file and the field.

A field may be absent (records written by older launches, or by tests, lack some); when present,
it has the shape its writer (`generations.record_launch`, `promote`, `rollback`, `stop`) gives it.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable
from typing import Any

GENERATION_ID = re.compile(r"\d{8}T\d{9}Z")  # utc_id's form: the file's name, so never a path
STATUSES = ("ready", "started", "failed")
BOOT_CACHES = ("warm", "cold", "none")  # boot_record's kinds; history prints them in a 4-wide column

Check = Callable[[Any], str | None]


def what(value: Any) -> str:
    return "missing" if value is None else f"a JSON {type(value).__name__}"


def _text(v: Any) -> str | None:
    return None if isinstance(v, str) else f"is {what(v)}, not text"


def _flag(v: Any) -> str | None:
    return None if isinstance(v, bool) else f"is {what(v)}, not true or false"


def _time(v: Any) -> str | None:
    """Epoch seconds: a finite number (a bool is a JSON true, not a time)."""
    ok = not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v)
    return None if ok else f"is {what(v)}, not a time in seconds"


def _seconds(v: Any) -> str | None:
    return _time(v) or (f"is {v}, below zero seconds" if v < 0 else None)


def _count(v: Any) -> str | None:
    ok = not isinstance(v, bool) and isinstance(v, int) and v >= 0
    return None if ok else f"is {what(v)}, not a count"


def _object(v: Any) -> str | None:
    return None if isinstance(v, dict) else f"is {what(v)}, not an object"


def _optional(check: Check) -> Check:
    return lambda v: None if v is None else check(v)


def _one_of(*choices: str) -> Check:
    def check(v: Any) -> str | None:
        if isinstance(v, str) and v in choices:
            return None
        shown = repr(v[:40]) if isinstance(v, str) else what(v)
        return f"is {shown}, none of {', '.join(choices)}"

    return check


def _list_of(check: Check) -> Check:
    def each(v: Any) -> str | None:
        if not isinstance(v, list):
            return f"is {what(v)}, not a list"
        return next((f"[{i}] {why}" for i, x in enumerate(v) if (why := check(x))), None)

    return each


def _map_of(check: Check) -> Check:
    """An object whose every value passes `check` (host -> ..., pin -> ...)."""

    def each(v: Any) -> str | None:
        if not isinstance(v, dict):
            return f"is {what(v)}, not an object"
        return next((f".{k[:40]} {why}" for k, x in v.items() if (why := check(x))), None)

    return each


def _table(fields: dict[str, Check], required: tuple[str, ...] = ()) -> Check:
    """An object whose named keys, where present (or `required`), pass their checks."""

    def check(v: Any) -> str | None:
        if not isinstance(v, dict):
            return f"is {what(v)}, not an object"
        for key, sub in fields.items():
            if key in v or key in required:
                why = sub(v.get(key))
                if why:
                    return f".{key} {why}"
        return None

    return check


# Every field a reader takes apart, with the shape it must have when present.
FIELDS: dict[str, Check] = {
    "good": _flag,
    "image": _optional(_table({"pin": _optional(_text), "ref": _optional(_text)})),
    "image_ids": _map_of(_optional(_text)),  # host -> the image ID its engine ran (release cut)
    "pins": _map_of(_object),
    "hosts": _list_of(_text),
    "fingerprints": _map_of(_object),
    "drift": _list_of(_text),
    "canary": _optional(_object),
    "memory": _object,
    "boot": _table(
        {
            "cache": _one_of(*BOOT_CACHES),
            "cache_key": _optional(_text),
            "regression": _optional(_text),
            "time_to_ready_s": _optional(_seconds),
            "previous_s": _optional(_seconds),
            "weight_load_s": _optional(_seconds),
            "per_host": _optional(_object),
        }
    ),  # fmt: skip
    # host -> its NAS-served files: status and watch print each note, the fleet view counts files
    "nas_weights": _map_of(
        _table(
            {"note": _text, "files": _optional(_count), "paths": _optional(_list_of(_text))},
            required=("note",),
        )
    ),
    "cache_seed": _map_of(_object),
    "promotion": _optional(_object),
    "rolled_back_to": _optional(_text),
    "rolled_back_from": _optional(_text),
    "stopped_at": _optional(_time),
    "stopped_why": _optional(_text),
}
REQUIRED_TEXT = ("id", "lane", "status", "recipe_text", "recipe_sha256", "fleet_text")


def problem(gen: Any, lane: str, stem: str) -> str | None:
    """What is wrong with a generation record read from recipes/<lane>/generations/<stem>.json, or None.

    Why the identity first: a record steers writes (its lane names the folder rollback writes
    into), and the recipe rollback relaunches must be the one that was proven good (its sha256
    must match its text).
    """
    if not isinstance(gen, dict):
        return f"a JSON {type(gen).__name__}, not a generation object"
    for key in REQUIRED_TEXT:
        if not isinstance(gen.get(key), str):
            return f"{key} is {what(gen.get(key))}, not text"
    if gen["lane"] != lane:
        return f"its lane {gen['lane'][:80]!r} is not the lane of its folder ({lane!r})"
    if gen["id"] != stem or not GENERATION_ID.fullmatch(gen["id"]):
        return f"its id {gen['id'][:80]!r} is not its file name ({stem!r}, a UTC id like 20261201T210000000Z)"
    if why := _time(gen.get("created_at")):
        return f"created_at {why}"
    if why := _one_of(*STATUSES)(gen["status"]):
        return f"status {why}"
    if hashlib.sha256(gen["recipe_text"].encode()).hexdigest() != gen["recipe_sha256"]:
        return "recipe_sha256 does not match recipe_text (the recipe was edited after it was recorded)"
    for key, check in FIELDS.items():
        if key in gen and (why := check(gen[key])):
            return f"{key}{'' if why.startswith(('.', '[')) else ' '}{why}"
    return None
