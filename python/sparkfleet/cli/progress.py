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


def quiet() -> bool:
    """`sparkfleet -q`: no bars, no step lines (results and errors still print)."""
    import click

    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx else None
    return bool(obj and obj.get("quiet"))


def wants_bar(as_json: bool) -> bool:
    return not as_json and not quiet() and sys.stderr.isatty()


def step_line(msg: str) -> None:
    """One progress line on stderr (`· msg`), unless -q."""
    import click

    if not quiet():
        click.echo(f"· {msg}", err=True)


class FleetProgress:
    """One bar per host, driven by the JSON-lines events each host's stage run reports."""

    def __init__(self, hosts: list[str]) -> None:
        self.progress = Progress(
            TextColumn("{task.fields[host]:>6} {task.description}"),
            BarColumn(),
            DownloadColumn(binary_units=True),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
        )
        self.tasks = {h: self.progress.add_task("waiting", total=None, host=h) for h in hosts}

    def __enter__(self) -> FleetProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def event(self, host: str, event: dict) -> None:
        task = self.tasks[host]
        kind = event.get("event")
        if kind == "phase":
            self.progress.reset(
                task, total=event.get("total_bytes") or None, description=event.get("name", "")
            )
        elif kind == "advance":
            self.progress.advance(task, event.get("bytes", 0))
        elif kind == "result":
            ok = event["run"].get("ok")
            self.progress.update(task, description="done" if ok else "FAILED")
        elif kind == "error":
            self.progress.update(task, description=f"error: {event.get('message', '')[:60]}")
