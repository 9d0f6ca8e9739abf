"""How the bench's records read on a terminal: a run, a comparison, the quality verdict, and the
progress while a run goes (a bar on a terminal, a line per phase off one). Shared by `bench` and
`report`, which print the same comparison."""

from __future__ import annotations

import time

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..bench import report as reports
from ..bench.estimate import duration
from ..bench.quality import TIMEOUT_KIND


class RichBenchProgress:
    """One bar over every request the bench sends (rich is thread-safe; the sweep uses threads)."""

    def __init__(self) -> None:
        self.bar = Progress(
            TextColumn("{task.description:<18}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.task = self.bar.add_task("bench", total=None)

    def __enter__(self) -> RichBenchProgress:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def start(self, total: int) -> None:
        self.bar.update(self.task, total=total)

    def step(self, label: str, advance: int = 1) -> None:
        self.bar.update(self.task, description=label, advance=advance)

    def note(self, line: str) -> None:
        """A line that stays, printed above the bar."""
        self.bar.console.print(f"· {line}", markup=False, highlight=False)


class LineBenchProgress:
    """Off a terminal: one stderr line each time the phase changes (its first word: warmup, pp512,
    sweep, quality ...) or the quality scenario changes, and every `every_s` a long scenario's live
    figures (elapsed, chunks streamed), so a log shows where an hour-long run is."""

    def __init__(self, every_s: float = 30.0) -> None:
        self.phase: str | None = None
        self.label: str | None = None
        self.every_s, self.said = every_s, time.monotonic()

    def start(self, total: int) -> None:
        pass

    def step(self, label: str, advance: int = 1) -> None:
        phase = label.split(" ")[0]
        step = label.split(" · ")[0]  # a quality scenario, without its live figures
        now = time.monotonic()
        if (
            phase != self.phase
            or (phase == "quality" and step != self.label and advance == 0)
            or (label != step and now - self.said >= self.every_s)  # a long scenario: now and then
        ):
            click.echo(f"· {label}", err=True)
            self.said = now
        self.phase, self.label = phase, step

    def note(self, line: str) -> None:
        click.echo(f"· {line}", err=True)



def _pm(ci: float | None) -> str:
    return f" ± {ci:.1f}" if ci is not None else ""


def _row_text(row) -> str:
    """`12.3 ± 0.4 t/s` (95 % CI), the figure net of the client round trip for pp, or why there is none."""
    if row.error:
        return f"FAILED {row.error}"
    if row.tps_mean is None:
        return row.unknown or "unknown"
    text = f"{row.tps_mean:.1f}{_pm(row.tps_ci95)} t/s"
    if row.tps_net_mean is not None:
        text += f" ({row.tps_net_mean:.1f}{_pm(row.tps_net_ci95)} net of client round trip)"
    return text


def print_bench(run, paths: reports.ReportPaths, metrics: dict, comparison) -> None:
    color = "green" if run.status == "ok" else "red"
    click.secho(f"bench {run.status.upper()}: {run.lane or run.url} ({run.model}), tag {run.tag}", fg=color)
    for failure in run.failures:
        click.secho(f"  failed: {failure}", fg="red")
    if run.weights:
        click.secho(f"  {run.weights} (launched with --allow-nas-weights)", fg="yellow")
    if run.prompt_sizing:
        click.echo(f"  prompt sizes in {run.prompt_sizing}")
    probe = run.decode_probe.metrics if run.decode_probe else None
    if probe and probe.ok and probe.decode_tps is not None and probe.ttft_s is not None:
        net = (
            f" ({(probe.ttft_s - run.client_rtt_s) * 1000:.0f} ms net of client round trip)"
            if run.client_rtt_s is not None and probe.ttft_s > run.client_rtt_s
            else ""
        )
        click.echo(
            f"  decode probe: {probe.decode_tps:.1f} tok/s, TTFT {probe.ttft_s * 1000:.0f} ms{net} "
            f"({probe.completion_tokens} tokens, {probe.chunks} chunks, tokens from {probe.token_source})"
        )
    if run.ttft is not None and run.ttft.mean is not None:
        click.echo(
            f"  TTFT ({run.ttft.prompt_tokens}-token prompt, {len(run.ttft.samples)} runs): "
            f"{run.ttft.mean * 1000:.1f}{_pm(run.ttft.ci95 * 1000 if run.ttft.ci95 is not None else None)} ms"
        )
    if run.client_rtt_s is not None:
        click.echo(f"  client round trip (GET /v1/models, no engine step): {run.client_rtt_s * 1000:.1f} ms")
    for row in run.table:
        click.echo(f"  {row.test:>7} @ d{row.depth:<5} {_row_text(row)}")
    for lv in run.sweep:
        if lv.ok and lv.ttft_s:
            click.echo(
                f"  c={lv.concurrency:<3} {lv.aggregate_tps:8.1f} tok/s aggregate, TTFT p50/p99 "
                f"{lv.ttft_s.p50 * 1000:.0f}/{lv.ttft_s.p99 * 1000:.0f} ms"
            )
        else:
            click.echo(f"  c={lv.concurrency:<3} FAILED ({lv.failed}/{lv.requests})")
    if run.spec_accept:
        click.echo(f"  spec accept length: {run.spec_accept.value:.2f} ({run.spec_accept.source})")
    else:
        click.echo("  spec accept length: none (no speculative decoding seen)")
    decode_bound = (run.roofline or {}).get("decode")
    if decode_bound:
        click.echo(
            f"  roofline: {decode_bound['pct_of_bound']:.1f} % of the {decode_bound['bound_tps']:.1f} tok/s "
            f"decode bound ({decode_bound['binding']})"
        )
    elif run.roofline and run.roofline.get("unavailable"):
        click.echo(f"  roofline: unavailable: {run.roofline['unavailable']}")
    if run.quality:
        for line in quality_lines(run.quality):
            click.echo(f"  {line}")
    elif run.quality_note:
        click.echo(f"  {run.quality_note}")
    took = f"  took {duration(run.duration_s)}"
    if run.estimate is not None:
        took += f" (estimated after the decode probe: {duration(run.estimate.seconds)} more before quality)"
    click.echo(took)
    if comparison is not None:
        print_comparison(comparison)
    click.echo(f"report: {paths.json}")
    click.echo(f"report: {paths.markdown}")
    if paths.png:
        click.echo(f"report: {paths.png}")


def quality_lines(q) -> list[str]:
    """The quality verdict: the score, then each scenario not passed and why (timeouts named)."""
    if q.status != "ok":
        return [f"quality: {q.status}: {q.error}"]
    timed_out = [f for f in q.failed_scenarios if f.failure_kind == TIMEOUT_KIND]
    head = f"quality: {q.score:.0f}/100 ({q.points}/{q.max_points}), {len(q.failed_scenarios)} not passed"
    if timed_out:
        head += f", {len(timed_out)} past the request deadline (left out of the score)"
    return [head, *(f"  {f.scenario_id} {f.status}: {f.summary or ''}" for f in q.failed_scenarios)]



def print_comparison(c: reports.Comparison) -> None:
    click.echo(f"compare {c.base} → {c.new}")
    for m in c.mismatches:
        click.secho(f"  {'≠' if m.blocking else '·'} {m.line()}", fg="yellow" if m.blocking else None)
    for f in c.failed:
        click.secho(f"  ✕ {f}", fg="red")
    if c.refused:
        why = (
            "these reports measured different things (settings or hosts differ, ≠ above)"
            if c.blocking
            else "a failed run's figures are not like for like with a good run's"
        )
        click.secho(
            f"refused: {why}; --force compares them anyway and marks each figure a difference touches",
            fg="yellow",
        )
        for r in c.regressions:
            click.secho(f"regression: {r}", fg="red")
        return
    for d in c.deltas:
        change = f"{d.change_pct:+.1f}%" if d.change_pct is not None else "n/a"
        base = f"{d.base:.4g}" if d.base is not None else "—"
        new = f"{d.new:.4g}" if d.new is not None else "—"
        flag = click.style(" REGRESSION", fg="red") if d.regression else ""
        marks = f"  ≠ {', '.join(d.differs)}" if d.differs else ""
        marks += {True: "  (within 95 % CIs)", False: "  (beyond 95 % CIs)", None: ""}[d.within_noise]
        click.echo(f"  {d.name:<22} {base:>10} → {new:>10}  {change:>8}  (limit {d.limit}){flag}{marks}")
    if c.ok:
        click.secho(
            "no regression" + (" (forced: marked figures are not like for like)" if c.forced else ""),
            fg="green",
        )
    for r in c.regressions:
        click.secho(f"regression: {r}", fg="red")

