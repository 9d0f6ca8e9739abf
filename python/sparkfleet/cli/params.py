"""Checks of option values that several verbs share, so each is spelled and worded once."""

from __future__ import annotations

import math

import click


def positive_seconds(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """A duration must be a finite number of seconds above zero: nan and inf never expire, and a
    negative wait is a traceback from time.sleep (click's FloatRange lets nan through)."""
    if value is not None and (not math.isfinite(value) or value <= 0):
        raise click.BadParameter(f"{value} is not a positive number of seconds")
    return value
