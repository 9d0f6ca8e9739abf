"""One meaning per exit code, everywhere: the codes are named (errors.ExitCode), their meanings are
one table (errors.EXIT_MEANINGS, rendered into docs/cli.md), a help that names a code says which
one, and the CLI never exits with a bare number.

A second concurrent `launch` exited 2 (usage) where a concurrent `stage` exited 75 (busy), and
`report compare` across different settings exited 1 where its help said 5; those two have their
own tests (tests/launch/test_launch_busy.py, tests/bench/test_report_compare.py).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import click
from clitree import walk

from sparkfleet.base.errors import EXIT_MEANINGS, ExitCode

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "python" / "sparkfleet"
NAMES = {c.name.lower(): c for c in ExitCode}
# "exit 5 (refused)", "exits 4 (unreachable)", and in a list "…; 5 (refused) when …"
NAMED = re.compile(r"\b(\d+) \((" + "|".join(NAMES) + r")\)")
EXIT_NUMBER = re.compile(r"\b[Ee]xit(?:s|ed|ing)?(?: code)? (\d+)\b(?! \()")


def help_texts() -> list[tuple[str, str]]:
    out = []
    for path, cmd in walk():
        where = "sparkfleet " + " ".join(path)
        out.append((where, " ".join((cmd.help or "").split())))
        for p in cmd.params:
            if isinstance(p, click.Option) and p.help:
                out.append((f"{where} {p.opts[-1]}", " ".join(p.help.split())))
    return out


def problems_in(text: str) -> list[str]:
    """Exit codes named without their meaning, or with another code's."""
    found = [f"exit {n} without its name, e.g. 'exit {n} (name)'" for n in EXIT_NUMBER.findall(text)]
    for number, name in NAMED.findall(text):
        if int(number) != NAMES[name]:
            found.append(f"{number} ({name}): {name} is {int(NAMES[name])}")
    return found


def test_every_code_has_one_meaning():
    assert set(EXIT_MEANINGS) == set(ExitCode)
    assert all(len(m) > 10 for m in EXIT_MEANINGS.values())


def test_help_texts_name_each_exit_code_by_its_meaning():
    bad = [f"{where}: {p}" for where, text in help_texts() for p in problems_in(text)]
    assert bad == []


def test_the_checker_catches_a_code_named_wrongly():
    assert problems_in("exits 5 (refused) when not like for like; 1 (shortfall) on a regression") == []
    assert problems_in("exit 2 (busy) when another run holds the lock") == ["2 (busy): busy is 75"]
    assert problems_in("exits 4 when a host is down") == ["exit 4 without its name, e.g. 'exit 4 (name)'"]


def test_user_docs_name_only_codes_that_exist():
    docs = [ROOT / "README.md", ROOT / "SECURITY.md", *sorted((ROOT / "docs").glob("*.md"))]
    bad = []
    for doc in docs:
        text = doc.read_text()
        for number in re.findall(r"\b[Ee]xit(?:s|ed)?(?: code)? (\d+)\b", text):
            if int(number) not in {int(c) for c in ExitCode}:
                bad.append(f"{doc.name}: exit {number}")
        for number, name in NAMED.findall(text.replace("`", "").lower()):
            if int(number) != NAMES[name]:
                bad.append(f"{doc.name}: {number} ({name})")
    assert bad == []


def _bare_exits(path: Path) -> list[str]:
    """exit calls and exit_code= arguments given a number rather than an ExitCode member."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        values = list(node.args[:1]) if name in ("exit", "SystemExit") else []
        values += [k.value for k in node.keywords if k.arg == "exit_code"]
        for value in values:
            numbers = [c for c in ast.walk(value) if isinstance(c, ast.Constant) and type(c.value) is int]
            if numbers:
                found.append(f"{path.relative_to(PKG)}:{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_the_cli_exits_only_with_named_codes():
    """Every verb's exit goes through ExitCode. The processes sparkfleet starts (the demo server,
    the gateway front, a rank's watchdog, a forked rsyncd) are not verbs and keep their own codes."""
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        if path.parent.name == "cli":
            bad += _bare_exits(path)
        else:  # exit_code= anywhere: a SparkfleetError's code is a verb's exit code
            bad += [b for b in _bare_exits(path) if "exit_code=" in b]
    assert bad == []
