"""Run the adversarial suite and print its figures per surface (one JSON line); `--write`: into SECURITY.md.

    .venv/bin/python tests/adversarial/figures.py [--examples N] [-k EXPR] [--write [--no-run]]

Figures are counted by the tests as they run (tests/adversarial/conftest.py, rules in tally.py),
not asserted or written down, per surface: bad inputs that the test's own oracle knows are bad
and how many were refused, faults that actually failed something (kill -9 points, full disks,
inode limits, read-only mounts), reruns that converged, and bytes lost — measured by comparing
every final file against its source after every fault, and printed as "not measured" where no
comparison was made (never a 0 that nobody counted).

Every surface in surfaces.py is reported, with the tests marked `surface(...)` for it and what
those tests counted; a surface without a case is listed as not covered. `--write` rewrites the
table between SECURITY.md's `surfaces:begin`/`surfaces:end` markers from the run (`--no-run`:
from the code and the collected marks only, keeping the figures of the rows that stay).
Needs root for the tmpfs mounts; without it those tests skip and their figures are absent.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SECURITY = REPO / "SECURITY.md"
BEGIN, END = (
    "<!-- surfaces:begin (written by tests/adversarial/figures.py --write) -->",
    "<!-- surfaces:end -->",
)
NOT_MEASURED = "not measured"
NOT_RUN = "not run"
# metric -> the metric counting how often it was measured
MEASURED_BY = {"lost_bytes": "lost_bytes_checks", "partial_bytes": "partial_bytes_checks"}
HEADER = (
    "surface",
    "takes",
    "not covered",
    "cases",
    "bad inputs refused / known bad",
    "faults",
    "lost bytes",
)
CHECKED = 3  # the columns the code and the collected marks decide (test_surface_coverage.py checks them)


def summarize(counts: dict[str, int]) -> dict[str, Any]:
    """Per-label figures (tally.py's labels) and totals; a byte count never measured reads "not measured".

    Keys are "label/metric" (tally.py); a key without a label is reported under "unlabelled",
    so it is still seen.
    """
    labels: dict[str, Counter] = {}
    for key, n in counts.items():
        label, _, metric = key.rpartition("/")
        labels.setdefault(label or "unlabelled", Counter())[metric] += n
    totals: Counter = Counter()
    for figures in labels.values():
        totals.update(figures)
    return {"labels": {s: shown(f) for s, f in sorted(labels.items())}, "totals": shown(totals)}


def shown(figures: Counter) -> dict[str, Any]:
    out: dict[str, Any] = dict(sorted(figures.items()))
    for metric, checks in MEASURED_BY.items():
        out[metric] = figures.get(metric, 0) if figures.get(checks) else NOT_MEASURED
    return out


def metrics(counts: dict[str, int]) -> Counter:
    """ "label/metric" counts summed per metric."""
    out: Counter = Counter()
    for key, n in counts.items():
        out[key.rpartition("/")[2]] += n
    return out


# ---- the per-surface table ------------------------------------------------------------------------


@dataclass
class Row:
    group: str
    takes: str = ""
    tests: set[str] = field(default_factory=set)  # nodeids of the cases marked for its surfaces
    missing: list[str] = field(default_factory=list)  # its surfaces without a case
    figures: tuple[str, str, str] = (NOT_RUN, NOT_RUN, NOT_RUN)
    required: bool = False  # holds a surface that must have a case

    def cells(self) -> list[str]:
        missing = ", ".join(f"`{m}`" for m in self.missing) if self.missing else "—"
        return [f"`{self.group}`", self.takes, missing, str(len(self.tests)), *self.figures]


def group_of(surface) -> str:
    if surface.kind == "http":
        return surface.id.rsplit(" ", 2)[0] + " " + surface.id.rsplit(" ", 1)[1]  # server + path
    return surface.group


def rows(marks: dict[str, list[str]], surfaces: list) -> list[Row]:
    """One row per verb (with its options), agent action, served path, and file: from the code's
    surfaces (surfaces.py) and the collected marks, no run."""
    out: dict[str, Row] = {}
    for s in surfaces:
        g = group_of(s)
        row = out.setdefault(g, Row(g))
        if not s.required:  # a flag: its cases count for its verb; it is never missing
            row.tests |= {n for n, ids in marks.items() if s.id in ids}
            continue
        if s.kind == "cli":
            opt = s.id.rsplit(" ", 1)[-1].removeprefix("cli:") if s.param is not None else None
            row.takes = (row.takes + ("; " if row.takes and opt else "")) + (opt or s.what)
        elif s.kind == "http":
            row.takes = " ".join(filter(None, [row.takes, s.what.split(" ")[0]]))
        else:
            row.takes = s.what
        covering = {n for n, ids in marks.items() if s.id in ids}
        row.tests |= covering
        row.required = True
        if not covering:
            row.missing.append(s.id)
    return [r for r in out.values() if r.required]  # a verb with flags only: its input is files


def row_figures(row_ids: set[str], tests: dict[str, dict]) -> tuple[str, str, str]:
    """The figures the tests marked for any of `row_ids` counted in the run."""
    marked = [t for t in tests.values() if row_ids & set(t.get("surfaces", ()))]
    if not marked:
        return ("—", "—", "—")
    m: Counter = Counter()
    for t in marked:
        m.update(metrics(t.get("counts", {})))
    failed = sum(t.get("outcome") == "failed" for t in marked)
    skipped = sum(t.get("outcome") == "skipped" for t in marked)
    bad = f"{m['bad_inputs_refused']} / {m['bad_inputs_tried']}" if m["bad_inputs_tried"] else "—"
    if failed or skipped:
        bad += f" ({failed} failed, {skipped} skipped)" if failed else f" ({skipped} skipped)"
    faults = str(m["faults_injected"]) if m["faults_injected"] else "—"
    lost = f"{m['lost_bytes']} ({m['lost_bytes_checks']} checks)" if m["lost_bytes_checks"] else NOT_MEASURED
    return (bad, faults, lost)


LABELS = "<!-- by label -->"


def label_table(counts: dict[str, int]) -> str:
    """Per tally label (what a test counts under, tally.py), from the run: every figure, including
    those of checks that attack no listed surface (the watch probe's hostile servers)."""
    shown = summarize(counts)["labels"]
    lines = [
        "Per tally label (tests/adversarial/tally.py), the same run:",
        "",
        "| label | bad inputs refused / known bad | accepted | faults | lost bytes (checks) | other counts |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    main = {"bad_inputs_tried", "bad_inputs_refused", "bad_inputs_accepted", "faults_injected",
            "lost_bytes", "lost_bytes_checks", "partial_bytes", "partial_bytes_checks"}  # fmt: skip
    for label, f in shown.items():
        lost = (
            f"{f['lost_bytes']} ({f.get('lost_bytes_checks', 0)})"
            if f.get("lost_bytes_checks")
            else NOT_MEASURED
        )
        other = ", ".join(f"{k} {v}" for k, v in f.items() if k not in main) or "—"
        bad = (
            f"{f.get('bad_inputs_refused', 0)} / {f['bad_inputs_tried']}"
            if f.get("bad_inputs_tried")
            else "—"
        )
        lines.append(
            f"| {label} | {bad} | {f.get('bad_inputs_accepted', 0)} | {f.get('faults_injected', 0) or '—'} | "
            f"{lost} | {other} |"
        )
    return "\n".join(lines)


def render(table: list[Row], preface: str, labels: str) -> str:
    lines = [BEGIN, "", preface, "", "| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r.cells()) + " |" for r in table]
    return "\n".join([*lines, "", LABELS, "", labels.strip(), "", END])


def parse(text: str) -> list[list[str]]:
    """The per-surface table's rows in SECURITY.md, as cells."""
    if BEGIN not in text or END not in text:
        return []
    block = text.split(BEGIN, 1)[1].split(END, 1)[0].split(LABELS, 1)[0]
    out = []
    for line in block.splitlines():
        if line.startswith("| ") and not line.startswith(("| surface |", "| --- |")):
            out.append([c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    return out


def collect_marks() -> dict[str, list[str]]:
    """{test nodeid: surface ids} of the suite, from a collection-only pytest run (conftest.py)."""
    with tempfile.TemporaryDirectory(prefix="sf-marks-") as tmp:
        out = Path(tmp) / "marks.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SPARKFLEET_FIGURES"))}
        env["SPARKFLEET_SURFACE_MARKS"] = str(out)
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", str(HERE)],
            env=env, cwd=REPO, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"collecting {HERE} failed:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
        return {k: v for k, v in json.loads(out.read_text()).items() if v}


def write(table: list[Row], preface: str, labels: str) -> None:
    text = SECURITY.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{SECURITY} has no {BEGIN} … {END} block to write")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    SECURITY.write_text(head + render(table, preface, labels) + tail)


def run_suite(examples: int, select: str | None) -> tuple[dict[str, Any], subprocess.CompletedProcess, float]:
    with tempfile.TemporaryDirectory(prefix="sf-figures-") as tmp:
        out = Path(tmp) / "figures.json"
        env = {
            **os.environ,
            "SPARKFLEET_FIGURES": str(out),
            "SPARKFLEET_ADVERSARIAL_EXAMPLES": str(examples),
        }
        started = time.monotonic()
        sel = ["-k", select] if select else []
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *sel, str(HERE)],
            env=env, cwd=REPO, capture_output=True, text=True,
        )  # fmt: skip
        doc = json.loads(out.read_text()) if out.exists() else {"counts": {}, "tests": {}}
    return doc, proc, time.monotonic() - started


def main() -> int:
    sys.path.insert(0, str(HERE))
    from surfaces import all_surfaces  # type: ignore[import-not-found]  # beside this file

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=40, help="hypothesis examples per property")
    parser.add_argument("-k", dest="select", help="only the tests pytest -k selects")
    parser.add_argument("--write", action="store_true", help="rewrite SECURITY.md's per-surface table")
    parser.add_argument("--no-run", action="store_true", help="with --write: rows from the code only")
    args = parser.parse_args()
    marks = collect_marks()
    surfaces = all_surfaces()
    table = rows(marks, surfaces)
    if args.no_run:
        if not args.write:
            parser.error("--no-run goes with --write")
        old = {
            cells[0]: tuple(cells[4:]) for cells in parse(SECURITY.read_text()) if len(cells) == len(HEADER)
        }
        for r in table:
            r.figures = old.get(f"`{r.group}`", r.figures)  # type: ignore[assignment]
        block = _old_block()
        preface = block.split("\n\n", 1)[0] if block and not block.startswith("|") else ""
        labels = block.split(LABELS, 1)[1] if LABELS in block else ""
        write(table, preface or "Not run yet: `tests/adversarial/figures.py --write`.", labels)
        return 0
    doc, proc, seconds = run_suite(args.examples, args.select)
    by_group: dict[str, set[str]] = {}
    for s in surfaces:
        by_group.setdefault(group_of(s), set()).add(s.id)
    for r in table:
        r.figures = row_figures(by_group[r.group], doc["tests"])
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    figures = summarize(doc["counts"])
    covered = sum(not r.missing for r in table)
    missing = sum(len(r.missing) for r in table)
    figures.update(
        pytest_exit=proc.returncode,
        pytest_summary=summary,
        seconds=round(seconds, 1),
        hypothesis_examples=args.examples,
        surfaces={r.group: dict(zip(HEADER[2:], r.cells()[2:], strict=True)) for r in table},
        surfaces_not_covered=missing,
    )
    print(json.dumps(figures, sort_keys=True))
    if args.write:
        t = metrics(doc["counts"])
        preface = (
            f"One run as {'root' if os.geteuid() == 0 else 'a user (the tmpfs tests skipped)'}, "
            f"{args.examples} hypothesis examples per property: `{summary}`, {seconds:.0f} s. "
            f"{covered} of {len(table)} rows have a case for every surface in them; "
            f'{missing} surfaces have none ("not covered"). In all: '
            f"{t['bad_inputs_refused']} / {t['bad_inputs_tried']} bad inputs refused, "
            f"{t['faults_injected']} faults, {t['lost_bytes']} bytes lost "
            f"({t['lost_bytes_checks']} comparisons)."
        )
        write(table, preface, label_table(doc["counts"]))
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-2000:])
    return proc.returncode


def _old_block() -> str:
    text = SECURITY.read_text()
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip() if BEGIN in text else ""


if __name__ == "__main__":
    sys.exit(main())
