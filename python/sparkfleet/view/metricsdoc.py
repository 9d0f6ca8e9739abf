"""docs/fleet-ops.md's metrics table, generated from the exporter's own registry.

Why generated: a table written by hand names metrics the exporter renamed long ago. The table is
what a scrape of `sparkfleet view serve` declares (name as scraped, type, help), with the labels
each family carries; `python -m sparkfleet.view.metricsdoc --write` puts it between the markers
in docs/fleet-ops.md, and tests/view/test_metricsdoc.py fails when the committed page differs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..base.atomic import write_bytes
from .metrics import SPECS, registry_for
from .snapshot import FleetSnapshot

DOC = Path("docs") / "fleet-ops.md"
BEGIN = "<!-- metrics table: python -m sparkfleet.view.metricsdoc --write -->"
END = "<!-- end of the metrics table -->"


def table() -> str:
    """The markdown table of every metric family the registry serves."""
    empty = FleetSnapshot(0.0, 0.0, 0, None, (), ())
    lines = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for family in registry_for(lambda: empty).collect():
        spec = SPECS[family.name]  # a counter family is named without _total; its samples with it
        name = spec.exposed
        labels = ", ".join(f"`{label}`" for label in spec.labels) or "—"
        lines.append(f"| `{name}` | {family.type} | {labels} | {family.documentation} |")
    return "\n".join(lines) + "\n"


def render(page: str) -> str:
    """`page` with the text between the markers replaced by the table."""
    if BEGIN not in page or END not in page:
        raise ValueError(f"{DOC} lacks the markers {BEGIN!r} ... {END!r}")
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table()}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--write"]:
        write_bytes(DOC, render(DOC.read_text()).encode())
        print(f"wrote the metrics table into {DOC}")
        return 0
    if args:
        print("usage: python -m sparkfleet.view.metricsdoc [--write]", file=sys.stderr)
        return 2
    sys.stdout.write(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
