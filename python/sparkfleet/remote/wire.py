"""The agent wire: a JSON object as a checked record, and what kind of failure an answer says.

`Record.encode` writes a record as the JSON object the agent reads on stdin and `Record.decode`
reads one back: a field that is None is left out (the agent reads an absent field and a null one
alike), a key the record does not know is ignored (a controller of another sparkfleet may send
more), and each field's JSON type is checked against the record's annotation, a field missing or
of the wrong type refused as a `BadRequest` that names the action and the field. The records of
each action are `sparkfleet.node.protocol`'s; this module is what the controller's client
(`nodecall`) and the agent both stand on, below either.

An error answer is `{"ok": false, "error", "hint", "exit_code"}`; what kind of failure it was
(`ErrorKind`) is read from it once, in `error_kind`, so callers test the kind, never the words.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from ..base.errors import ExitCode, SparkfleetError

VERSION_HINT = "deploy the same sparkfleet to the controller and the nodes (deploy .#<host>.sparkfleet)"


class ErrorKind(enum.Enum):
    """What kind of failure an error is: callers branch on this, never on the message's words."""

    UNREACHABLE = "unreachable"  # ssh could not reach the node (a Spark that is off looks so too)
    REFUSED = "refused"  # the agent answered {"ok": false}: the action refused, or the request was bad
    CRASHED = "crashed"  # the action raised what no check foresaw (its traceback is on the node)
    MEMSTOP = "memstop"  # the node's memory watchdog stopped the lane's ranks there


def error_kind(answer: dict) -> ErrorKind:
    """The kind of an agent's error answer: the exit code it carries says whether the action crashed."""
    return ErrorKind.CRASHED if answer.get("exit_code") == ExitCode.CRASHED else ErrorKind.REFUSED


def error_answer(exc: SparkfleetError) -> dict:
    """The answer to a refused request (the one shape every action's error takes on the wire)."""
    return {"ok": False, "error": exc.message, "hint": exc.hint, "exit_code": int(exc.exit_code)}


class BadRequest(SparkfleetError):
    """A request the agent cannot read: a field missing or of the wrong JSON type."""

    exit_code = ExitCode.USAGE


R = TypeVar("R", bound="Record")


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return {dict: "an object", list: "an array", str: "a string", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def _convert(action: str, name: str, hint: Any, value: Any) -> Any:
    """`value` (decoded JSON) as the annotation `hint` wants it; BadRequest when it is not that."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(action, name, inner, value)
    want = origin or hint
    ok = {
        str: isinstance(value, str),
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, int | float) and not isinstance(value, bool),  # kept as sent: 120 stays 120
        dict: isinstance(value, dict),
        list: isinstance(value, list),
    }.get(want)
    if dataclasses.is_dataclass(want):
        if not isinstance(value, dict):
            ok = False
        else:
            return want.decode(value, action, f"{name}.")
    if not ok:
        expected = {str: "a string", bool: "true or false", int: "an integer", float: "a number",
                    dict: "an object", list: "an array"}.get(want, "an object")  # fmt: skip
        raise BadRequest(
            f"the {action} request's {name} is {_type_name(value)} {str(value)[:60]!r}, not {expected}",
            hint=VERSION_HINT,
        )
    if want is list and typing.get_args(hint):
        (item,) = typing.get_args(hint)
        return [_convert(action, f"{name}[{i}]", item, v) for i, v in enumerate(value)]
    return value


def _encode(value: Any) -> Any:
    if isinstance(value, Record):
        return value.encode()
    if isinstance(value, list):
        return [_encode(v) for v in value]
    return value


@dataclass(frozen=True)
class Record:
    """A JSON object of the contract: `encode` for the wire, `decode` back (checked)."""

    def encode(self) -> dict[str, Any]:
        """The JSON object: every field by its name, a None one left out."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = _encode(value)
        return out

    @classmethod
    def decode(cls: type[R], raw: dict, action: str | None = None, within: str = "") -> R:
        """The record from a decoded JSON object; BadRequest names a field missing or mistyped
        (`within`: the path of the field that holds this record, for the message)."""
        action = action or getattr(cls, "ACTION", cls.__name__)
        hints = typing.get_type_hints(cls)
        values = {}
        for f in dataclasses.fields(cls):
            if f.name in raw:
                values[f.name] = _convert(action, within + f.name, hints[f.name], raw[f.name])
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise BadRequest(f"the {action} request lacks '{within}{f.name}'", hint=VERSION_HINT)
        return cls(**values)


def required(action: str, name: str, value: Any) -> Any:
    """`value` of an optional field that this use of the request needs (BadRequest when absent)."""
    if value is None:
        raise BadRequest(f"the {action} request lacks '{name}'", hint=VERSION_HINT)
    return value


@dataclass(frozen=True)
class Request(Record):
    """One action's request: `ACTION` is the agent verb that reads it."""

    ACTION: ClassVar[str] = ""


@dataclass(frozen=True)
class LaneRequest(Request):
    """A request about one lane on one node: the lane and where its records live there."""

    lane: str
    state_dir: str
