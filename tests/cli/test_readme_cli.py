"""The README and docs/ name only verbs and options the CLI has (checked against the real click tree).

What counts as naming: every code span in docs/cli.md's CLI table (first column) and every code
span or shell line that starts with `sparkfleet ` in README.md and every docs/*.md page. Verbs are
followed down the tree (`report compare`, `pins resolve|verify`); every `--option` / `-x` after
them must exist on that command or on the root (`--root`, `-v`). New verbs from any branch are
checked the same way once the README or a docs page names them.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
from clitree import children, option_names

from sparkfleet.cli import main

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CLI_DOC = ROOT / "docs" / "cli.md"  # the CLI table, the conventions, the exit codes


def user_docs() -> list[Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md"))]
SPAN = re.compile(r"`([^`]+)`")
OPTION = re.compile(r"^-{1,2}[A-Za-z][\w-]*")


def _cli_table_rows(text: str) -> list[str]:
    if "\n## CLI" not in text:
        return []
    section = text.split("\n## CLI", 1)[1].split("\n## ", 1)[0]
    return [ln for ln in section.splitlines() if ln.startswith("| `")]


def mentions(text: str) -> list[str]:
    """Command forms the README names, without the leading `sparkfleet`."""
    out = []
    for row in _cli_table_rows(text):
        out += SPAN.findall(row.split(" | ")[0])
    for span in SPAN.findall(text):
        if span.startswith("sparkfleet "):
            out.append(span[len("sparkfleet ") :])
    for line in text.splitlines():
        if line.startswith("sparkfleet "):
            out.append(line[len("sparkfleet ") :].split("  #")[0].split(" # ")[0])
    return [m.replace("\\|", "|") for m in out]


def resolve(form: str) -> list[str]:
    """Problems with one command form ([] when every verb and option exists)."""
    tokens = form.replace("[", " ").replace("]", " ").replace("…", " ").split()
    global_opts = option_names(main)
    cmds: list[tuple[str, click.Command]] = [("sparkfleet", main)]
    i = 0
    # global options may come before the verb: `sparkfleet --root DIR status LANE`
    while i < len(tokens) and tokens[i].startswith("-"):
        i += 2 if tokens[i] == "--root" else 1
    while i < len(tokens) and isinstance(cmds[0][1], click.Group):
        subs = children(cmds[0][1])  # type: ignore[arg-type]
        names = tokens[i].split("|")
        if not all(re.fullmatch(r"[a-z][a-z0-9-]*", n) for n in names):
            break
        missing = [n for n in names if n not in subs]
        if missing:
            where = " ".join(c.split(" ", 1)[1] for c, _ in cmds if " " in c)
            return [f"`sparkfleet {form}`: no verb {where} {missing[0]}".replace("  ", " ")]
        cmds = [(f"{cmds[0][0]} {n}", subs[n]) for n in names]
        i += 1
    problems = []
    for tok in tokens[i:]:
        for alt in tok.split("|"):
            m = OPTION.match(alt)
            if not m or alt in ("-", "--"):
                continue
            opt = m.group(0)
            for path, cmd in cmds:
                if opt not in option_names(cmd) | global_opts:
                    problems.append(f"`sparkfleet {form}`: {path} has no option {opt}")
    return problems


def test_every_verb_and_option_the_readme_names_exists():
    assert len(_cli_table_rows(CLI_DOC.read_text())) > 20  # the table was found at all
    assert len(mentions(README.read_text())) > 10  # the README's night in commands
    for path in user_docs():
        problems = [p for form in mentions(path.read_text()) for p in resolve(form)]
        assert problems == [], path.name


def test_the_checker_catches_what_does_not_exist():
    assert resolve("stage HOST --lane L --dry-run") == []
    assert resolve("report compare A B --lane L") == []
    assert resolve("pins resolve|verify") == []
    assert resolve("--root DIR status LANE") == []
    assert resolve("stage LANE --host dgx2") == [
        "`sparkfleet stage LANE --host dgx2`: sparkfleet stage has no option --host"
    ]
    assert resolve("report frobnicate")[0].endswith("no verb report frobnicate")
    assert resolve("warp LANE")[0].endswith("no verb warp")


def test_cli_table_is_one_table():
    """A blank line inside the table splits it: the rows after it render as a paragraph."""
    section = CLI_DOC.read_text().split("\n## CLI", 1)[1].split("\n## ", 1)[0]
    lines = section.splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith("| verb"))
    body = lines[first:]
    end = next((i for i, ln in enumerate(body) if not ln.startswith("|")), len(body))
    rest = [ln for ln in body[end:] if ln.startswith("| `")]
    assert rest == [], f"table rows after a break: {rest[:2]}"
    assert any("`demo" in r for r in body[:end]) and any("`launch LANE" in r for r in body[:end])
