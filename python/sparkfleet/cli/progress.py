"""Progress for long work: a rich bar (bytes, rate, ETA) on a terminal, nothing otherwise."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)


class RichStageProgress:
    """Implements stage.execute.StageProgress with one bar per phase (thread-safe: rich locks)."""

    def __init__(self) -> None:
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(binary_units=True),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self.task: TaskID | None = None
        self.counting = False

    def __enter__(self) -> RichStageProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def phase(self, name: str, total_bytes: int, total_items: int) -> None:
        if self.task is not None:
            self.progress.update(self.task, completed=self.progress.tasks[-1].total or 0)
        self.counting = total_bytes == 0
        total = total_items if self.counting else total_bytes
        self.task = self.progress.add_task(name, total=total)

    def advance(self, nbytes: int) -> None:
        if self.task is not None and not self.counting:
            self.progress.advance(self.task, nbytes)

    def item_done(self, rel: str) -> None:
        if self.task is not None and self.counting:
            self.progress.advance(self.task, 1)


def wants_bar(as_json: bool) -> bool:
    return not as_json and sys.stderr.isatty()
