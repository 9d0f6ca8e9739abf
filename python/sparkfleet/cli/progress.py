"""Progress for long work: a rich bar (bytes, rate, ETA) on a terminal, nothing otherwise."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


def byte_bar(first_column: str) -> Progress:
    """A rich bar on stderr (bytes, rate, ETA). rich is imported here, when a bar is drawn: a
    run with --json, -q or no terminal never draws one and should not pay its ~35 ms import."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    return Progress(
        TextColumn(first_column),
        BarColumn(),
        DownloadColumn(binary_units=True),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=False,
    )


class RichStageProgress:
    """Implements stage.execute.StageProgress with one bar per phase (thread-safe: rich locks)."""

    def __init__(self) -> None:
        self.progress = byte_bar("{task.description}")
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
        self.progress = byte_bar("{task.fields[host]:>6} {task.description}")
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


class BootView:
    """A launch's boot, per rank: a live table on a terminal, else one stderr line per stage change."""

    def __init__(self, as_json: bool) -> None:
        self.live = None
        self.lines = not as_json and not quiet()
        self.shown: dict[int, str | None] = {}
        if wants_bar(as_json):
            from rich.console import Console
            from rich.live import Live

            self.live = Live(console=Console(stderr=True), refresh_per_second=4, transient=False)

    def __enter__(self) -> BootView:
        if self.live is not None:
            self.live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.stop()

    def update(self, ranks: list) -> None:
        """`ranks`: lane.readiness.RankProgress snapshots."""
        if self.live is not None:
            self.live.update(boot_table(ranks))
            return
        if not self.lines:
            return
        import click

        for r in ranks:
            if r.stage is not None and self.shown.get(r.rank) != r.stage:
                self.shown[r.rank] = r.stage
                click.echo(
                    f"· rank {r.rank} on {r.host}: {r.stage} "
                    f"({r.stages_seen}/{r.stages_total} stages, {r.elapsed_s:.1f} s)",
                    err=True,
                )


def boot_table(ranks: list):
    """The live boot table. Every column but the log line keeps its full width (an 80-column
    terminal squeezed "stage" to nothing and "weights" to an ellipsis); the log line takes what is
    left and is cut at its end. Cells are plain text: a stage such as "[moe_b12x_next] armed" is
    not rich markup."""
    from rich.table import Table
    from rich.text import Text

    rows = []
    for r in ranks:
        stage = f"{r.stages_seen}/{r.stages_total} {r.stage or '—'}" if r.stages_total else (r.stage or "—")
        rows.append((str(r.rank), r.host, stage if r.running else f"EXITED {stage}", f"{r.elapsed_s:.0f} s",
                     r.load_progress or "—", cut_right(r.last_line, LAST_LINE_CHARS)))  # fmt: skip
    table = Table(title="boot", expand=True)
    for i, col in enumerate(("rank", "host", "stage", "elapsed", "weights")):
        widest = max([len(col), *(len(row[i]) for row in rows)])
        table.add_column(col, no_wrap=True, overflow="ellipsis", min_width=min(widest, COLUMN_CHARS))
    table.add_column("last log line", no_wrap=True, overflow="ellipsis", ratio=1, min_width=8)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    return table


COLUMN_CHARS = 28  # the most a column other than the log line takes (a longer stage is cut)
LAST_LINE_CHARS = 80


def cut_right(line: str, width: int) -> str:
    """A log line's start is what says what it is ("openai_server: listening…"): keep it, cut the end."""
    return line if len(line) <= width else line[: width - 1] + "…"


class Heartbeat:
    """One line on a terminal, redrawn in place: a long quiet loop (watch) shows it is alive.

    Lines that must stay (`say`) first clear the heartbeat, then print; the heartbeat comes back
    with the next `beat`. Off a terminal nothing is drawn: a journal gets the lines only.
    """

    CLEAR = "\r\x1b[2K"

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.shown = False

    def beat(self, line: str) -> None:
        if self.enabled:
            sys.stderr.write(f"{self.CLEAR}{line}")
            sys.stderr.flush()
            self.shown = True

    def say(self, line: str) -> None:
        self.end()
        sys.stderr.write(f"{line}\n")
        sys.stderr.flush()

    def end(self) -> None:
        """Leave the terminal on a fresh line (before a result, or when the loop ends)."""
        if self.shown:
            sys.stderr.write(self.CLEAR)
            sys.stderr.flush()
            self.shown = False
