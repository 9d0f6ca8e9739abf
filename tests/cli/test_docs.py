"""The user documentation: docs/recipes.md is generated from the JSON Schemas and cannot drift; no
issue numbers in what a user reads; the README stays a ten-minute read that links the rest."""

from __future__ import annotations

import re
from pathlib import Path

from sparkfleet.fleet import schemadoc

ROOT = Path(__file__).resolve().parents[2]
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_recipes_reference_is_the_schemas_rendered():
    committed = (ROOT / schemadoc.DOC).read_text()
    assert committed == schemadoc.render(), "regenerate: python -m sparkfleet.fleet.schemadoc --write"


def test_every_schema_key_is_in_the_reference():
    page = schemadoc.render()
    for name, _, _ in schemadoc.SCHEMAS:
        schema = schemadoc.load_schema(name)
        for section, node in schema["properties"].items():
            assert f"### `{section}`" in page
            for key in node.get("properties", {}):
                assert f"`{section}.{key}`" in page, (name, section, key)
    for key in ("launch.ready_signatures", "launch.receipt_roots", "launch.cache_mount"):
        row = next(ln for ln in page.splitlines() if ln.startswith(f"| `{key}`"))
        assert row.rstrip(" |").split(" | ")[-1], f"{key} has no meaning in the reference"


def test_no_issue_numbers_in_user_facing_docs():
    for path in USER_DOCS:
        found = re.findall(r"\bissues? \d+\b|\(issue \d+", path.read_text(), flags=re.IGNORECASE)
        assert found == [], (path.name, found)


def test_readme_is_short_and_points_onward():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    headings = ("## Set-up: two commands", "## A night, in commands", "## The lanes", "## Where to look next")
    for heading in headings:
        assert heading in text
    assert ". .venv/bin/activate" in text  # sparkfleet on PATH after `make demo`
    for doc in ("docs/cli.md", "docs/recipes.md", "docs/staging.md", "docs/bench.md", "docs/roofline.md",
                "docs/nix.md", "docs/fleet-ops.md", "docs/lanes.md", "SECURITY.md"):  # fmt: skip
        assert f"]({doc})" in text, doc


def test_cli_reference_tables_are_the_click_tree_and_exit_codes_rendered():
    from sparkfleet.cli import clidoc

    committed = (ROOT / clidoc.DOC).read_text()
    assert committed == clidoc.render(committed), "regenerate: python -m sparkfleet.cli.clidoc --write"


def test_every_verb_has_a_row_in_the_cli_reference():
    """The hand-written table left out gateway, keys, power, registry and release."""
    import click
    from clitree import walk

    page = (ROOT / "docs" / "cli.md").read_text()
    rows = [ln for ln in page.splitlines() if ln.startswith("| `")]
    missing = []
    for path, cmd in walk():
        leaf = path and not isinstance(cmd, click.Group) and not getattr(cmd, "hidden", False)
        if leaf and not any(r.startswith(f"| `{' '.join(path)}") for r in rows):
            missing.append(" ".join(path))
    assert missing == []
    for verb in ("gateway up", "keys add", "power on", "registry init", "release cut"):
        assert any(r.startswith(f"| `{verb}") for r in rows), verb


def test_relative_links_in_user_docs_resolve():
    """docs/cli.md linked SECURITY.md as docs/SECURITY.md; every relative link must name a file."""
    docs = [
        *USER_DOCS,
        *sorted((ROOT / "docs" / "design").glob("*.md")),
        ROOT / "SECURITY.md",
        ROOT / "modules" / "README.md",
    ]
    broken = []
    for doc in docs:
        text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.DOTALL)  # code blocks are not links
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            if not (doc.parent / target.split("#", 1)[0]).exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert broken == []


# Pages other helpers are rewriting in the same round (their text is theirs to change), and the
# benchmarks index, which names the smoke test that runs each script by design.
NOT_YET = {"nix.md", "serving.md", "images.md", "benchmarks.md"}
DESIGN_LOG = [
    (re.compile(r"\btests/[\w/]+"), "a test path"),
    (re.compile(r"\bpython/sparkfleet/[\w/.]+"), "a source path"),
    (re.compile(r"\bRe-run \d{4}-\d{2}-\d{2}"), "a dated re-run"),
    (re.compile(r"\bnight[- ]shift\b", re.IGNORECASE), "the night shift (whose?)"),
]


def test_operator_docs_are_not_a_design_log():
    """The README and docs/ speak to an operator: what to run, what it prints, why. Test paths,
    source paths, dated re-runs and in-jokes go to docs/design/ (linked) or to docstrings."""
    found = []
    for path in USER_DOCS:
        if path.name in NOT_YET:
            continue
        text = re.sub(r"<!--.*?-->", "", path.read_text(), flags=re.DOTALL)
        if path.name == "README.md":  # its Layout block names the folders, tests/ among them
            text = text.split("## Layout", 1)[0]
        for pattern, what in DESIGN_LOG:
            found += [f"{path.name}: {what}: {m}" for m in pattern.findall(text)]
    assert found == []
    for doc in ("staging", "bench", "roofline", "lanes", "fleet-ops"):
        assert (ROOT / "docs" / "design" / f"{doc}.md").is_file(), doc  # where the notes went


def test_what_an_operator_is_told_names_no_ticket_and_no_night():
    """A hint said "the 13.3 t/s night", the fleet file "(issue 14)": words only their author reads."""
    import ast

    odd = re.compile(r"\bissues? \d+|\(issue|\bthe [\d.]+ t/s night\b", re.IGNORECASE)
    found = []
    for path in sorted((ROOT / "python" / "sparkfleet").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "hint":
                text = " ".join(c.value for c in ast.walk(node.value)
                                if isinstance(c, ast.Constant) and isinstance(c.value, str))  # fmt: skip
                if odd.search(text):
                    found.append(f"{path.relative_to(ROOT)}:{node.value.lineno}: {text[:80]}")
    for path in [ROOT / "hosts" / "fleet.toml", *sorted((ROOT / "recipes").glob("*/recipe.toml"))]:
        found += [f"{path.relative_to(ROOT)}: {m}" for m in odd.findall(path.read_text())]
    assert found == []
