"""Every fix doctor can print runs: each `sparkfleet …` command in a hint parses with the real CLI.

Where hints come from: every string doctor.py writes, and every `hint=` of a SparkfleetError
anywhere in the package (doctor shows the hints of the errors its checks catch). f-string
fields are filled with a sample word; in a hint with backticks only the backticked commands
count, otherwise a command runs to the end of its clause.
"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import click
import pytest
from clitree import children

from sparkfleet.cli import main

PKG = Path(__file__).resolve().parents[2] / "python" / "sparkfleet"
SAMPLE = "x1"


def _text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            _text(v) or SAMPLE if not isinstance(v, ast.FormattedValue) else SAMPLE for v in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        return None if left is None or right is None else left + right
    return None


def _whole_strings(node: ast.AST) -> list[str]:
    """The complete strings an expression can evaluate to (both arms of `a if c else b`, `a or b`)."""
    if isinstance(node, ast.IfExp):
        return _whole_strings(node.body) + _whole_strings(node.orelse)
    if isinstance(node, ast.BoolOp):
        return [t for v in node.values for t in _whole_strings(v)]
    text = _text(node)
    return [text] if text else []


def hint_strings() -> list[tuple[str, str]]:
    out = []
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text())
        where = str(path.relative_to(PKG))
        parts = {
            id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in ast.walk(n) if v is not n
        }
        for node in ast.walk(tree):
            if (
                path.name == "doctor.py"
                and isinstance(node, ast.JoinedStr | ast.Constant)
                and id(node) not in parts
            ):
                out += [(where, t) for t in _whole_strings(node) if "sparkfleet " in t]
            if isinstance(node, ast.keyword) and node.arg == "hint":
                out += [(where, t) for t in _whole_strings(node.value) if "sparkfleet " in t]
    return out


def commands_in(text: str) -> list[str]:
    if "`" in text:
        spans = re.findall(r"`([^`]*)`", text)
        return [s for s in spans if s.startswith("sparkfleet ")]
    verbs = "|".join(re.escape(v) for v in children(main))
    out = []
    for m in re.finditer(rf"sparkfleet (?=(?:{verbs})\b|-)", text):
        clause = re.split(r"[;,()]| or | then ", text[m.start() :])[0]
        out.append(clause.strip().rstrip("."))
    return out


def parse(command: str) -> None:
    """Parse like the shell and click would, invoking nothing; raise click's error if it does not."""
    tokens = shlex.split(command)[1:]
    cmd: click.Command = main
    i = 0
    while i < len(tokens) and tokens[i].startswith("-"):  # global options before the verb
        i += 2 if tokens[i] == "--root" else 1
    while isinstance(cmd, click.Group):
        if i >= len(tokens):
            raise click.UsageError(f"{command!r}: no verb")
        sub = children(cmd).get(tokens[i])
        if sub is None:
            raise click.UsageError(f"{command!r}: no verb {tokens[i]!r}")
        cmd, i = sub, i + 1
    # Under main's own context, as the real CLI parses it: click caches a command's help option the
    # first time it makes a context, and a context without main's settings would cache `--help`
    # alone, so a later `sparkfleet VERB -h` in the same process would be refused.
    root = click.Context(main, info_name="sparkfleet", **main.context_settings)
    cmd.make_context(cmd.name or "", tokens[i:], parent=root)


HINTS = [(w, t, c) for w, t in hint_strings() for c in commands_in(t)]


def test_hints_were_found():
    assert any(w == "ops/doctor.py" for w, _, _ in HINTS)
    assert len(HINTS) >= 8


@pytest.mark.parametrize("where,text,command", HINTS, ids=[c for _, _, c in HINTS])
def test_every_hinted_command_parses(where, text, command):
    try:
        parse(command)
    except click.ClickException as exc:
        pytest.fail(f"{where}: hint {text!r}: `{command}` does not parse: {exc.format_message()}")


def test_the_parser_rejects_what_does_not_run():
    with pytest.raises(click.UsageError):
        parse("sparkfleet stage LANE --host dgx2")  # the hint doctor used to print
    with pytest.raises(click.UsageError):
        parse("sparkfleet frobnicate")
    parse("sparkfleet stage dgx2 --lane LANE")
