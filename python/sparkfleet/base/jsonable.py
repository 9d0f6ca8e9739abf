"""Records → plain JSON values: the one converter the CLI, the node agent and reports share.

Kept free of click and rich so the node-side agent can import it without paying for the CLI.
"""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path
from typing import Any


def to_jsonable(value: Any, *, hidden_fields: bool = False, float_digits: int | None = None) -> Any:
    """Dataclasses, paths, enums, tuples and sets → JSON values.

    Dataclass fields declared `repr=False` (raw documents, secrets, bulky series) are left out
    unless `hidden_fields`; `float_digits` rounds floats (reports keep their numbers readable).
    """

    def convert(v: Any) -> Any:
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            shown = (f for f in dataclasses.fields(v) if hidden_fields or f.repr)
            return {f.name: convert(getattr(v, f.name)) for f in shown}
        if isinstance(v, dict):
            return {str(k): convert(x) for k, x in v.items()}
        if isinstance(v, set | frozenset):
            return sorted((convert(x) for x in v), key=str)
        if isinstance(v, list | tuple):
            return [convert(x) for x in v]
        if isinstance(v, Path):
            return str(v)
        if isinstance(v, enum.Enum):
            return v.value
        if isinstance(v, float) and float_digits is not None:
            return round(v, float_digits)
        return v

    return convert(value)
