"""How the adversarial suite counts, so that its figures can fail.

Every figure belongs to a surface (`inventory`, `stage-kill9`, `image-archive`, ...) and is
stored as "surface/metric" in the session's Counter (conftest.py). Three rules:

* a bad input is counted (`bad_inputs_tried`) only when an oracle written in the test, not the
  checker under test, knows it is bad — and `bad_inputs_refused` only when the checker then
  refused it; a bad input it accepted is counted (`bad_inputs_accepted`) before the test fails;
* a fault is counted (`faults_injected`) only when something actually failed (a process was
  killed, a write was refused); a fault level that the run simply fits is `runs_that_fit`;
* lost bytes are measured by comparing every final file against its source after every fault
  (`lost_bytes_checks` counts the comparisons): a surface that never compared prints
  "not measured", never 0. The count is added before any assert on it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping


def count(figures: Counter, surface: str, metric: str, n: int = 1) -> None:
    figures[f"{surface}/{metric}"] += n


def bad_input(figures: Counter, surface: str, refused: bool) -> None:
    """One input the test's own oracle knows is bad; `refused`: the code under test refused it."""
    count(figures, surface, "bad_inputs_tried")
    count(figures, surface, "bad_inputs_refused" if refused else "bad_inputs_accepted")


def lost_bytes(
    figures: Counter, surface: str, source: Mapping[str, bytes | str], final: Mapping[str, bytes | str]
) -> int:
    """Bytes of `source` (path -> bytes, or a link text/"dir") that `final` lacks or holds different.

    Plus bytes under a final name that exists but differs from its source (partial or foreign):
    those are counted even when the source also lacks the name.
    """
    lost = 0
    for rel, content in source.items():
        if isinstance(content, bytes) and final.get(rel) != content:
            lost += len(content)
    for rel, content in final.items():
        if rel not in source and isinstance(content, bytes) and ".sf-tmp-" not in rel:
            lost += len(content)  # a final name the source never had: foreign bytes
    count(figures, surface, "lost_bytes", lost)
    count(figures, surface, "lost_bytes_checks")
    return lost


def partial_bytes(
    figures: Counter, surface: str, source: Mapping[str, bytes | str], final: Mapping[str, bytes | str]
) -> int:
    """Right after a fault: bytes under final names that differ from their source (absent is fine)."""
    bad = sum(
        len(c) if isinstance(c, bytes) else 1
        for rel, c in final.items()
        if ".sf-tmp-" not in rel and c != "dir" and source.get(rel) != c
    )
    count(figures, surface, "partial_bytes", bad)
    count(figures, surface, "partial_bytes_checks")
    return bad
