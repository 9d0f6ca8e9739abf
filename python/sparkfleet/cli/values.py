"""Option types whose values are refused at parse time, naming the option, before a verb does anything.

Why: a float option took `nan`, `inf` and negatives (`watch --interval nan` probed in a tight loop,
`stage --reserve-gib nan` reached every host, `launch --timeout -1` planned a launch), and click's
FloatRange lets `nan` through (every comparison with it is false). A number of seconds or GiB is
finite and not negative; one that bounds a wait may also have to be above zero. A folder a verb
writes into is refused the same way when it cannot be written (`view targets --out /proc/x` used
to fail only after its work, `view serve --targets-dir` never, in its background loop).
"""

from __future__ import annotations

import math
from pathlib import Path

import click

from ..base.atomic import writable_dir
from ..base.errors import SparkfleetError


class Quantity(click.ParamType):
    """A finite, non-negative float in `unit` (above zero when `above_zero`)."""

    def __init__(self, unit: str, above_zero: bool = False) -> None:
        self.name = unit
        self.above_zero = above_zero

    def convert(self, value, param, ctx):  # type: ignore[no-untyped-def]
        if isinstance(value, float):
            number = value
        else:
            try:
                number = float(value)
            except (TypeError, ValueError):
                self.fail(f"{value!r} is not a number of {self.name}", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number of {self.name}", param, ctx)
        if number < 0 or (self.above_zero and number == 0):
            bound = "above zero" if self.above_zero else "zero or more"
            self.fail(f"{value!r} {self.name}: must be {bound}", param, ctx)
        return number


SECONDS = Quantity("seconds")
POSITIVE_SECONDS = Quantity("seconds", above_zero=True)  # a deadline or a period: 0 would never wait
SIZE_GIB = Quantity("GiB")


class WritableDir(click.Path):
    """A folder the verb writes files into: one that cannot be made or written (a file in the way,
    a read-only or pseudo filesystem) is refused at parse time, naming the option; nothing is made."""

    def __init__(self) -> None:
        super().__init__(file_okay=False, path_type=Path)

    def convert(self, value, param, ctx):  # type: ignore[no-untyped-def]
        folder = super().convert(value, param, ctx)
        try:
            writable_dir(Path(folder), "folder", "name a folder this user can create and write")
        except SparkfleetError as exc:
            self.fail(exc.message, param, ctx)
        return folder


WRITABLE_DIR = WritableDir()
