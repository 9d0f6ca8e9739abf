"""`sparkfleet smoke`, `sparkfleet bench`, `sparkfleet report list|compare|html`.

Exit codes: 0 all good; 1 a smoke answer was wrong, a bench step failed (the report says which) or
a comparison found a regression; 2 a usage or inventory error; 5 (refused) a comparison of reports
that measured different things (other settings or host fingerprints) without --force. An API key,
when the server wants one, comes from $SPARKFLEET_API_KEY (or the variable the recipe's [bench]
api_key_env names), never from the command line, and never reaches a report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..base.errors import ExitCode, SparkfleetError
from ..bench import report as reports
from ..bench import session
from ..bench.estimate import duration
from ..bench.probes import DecodeProbe
from ..bench.quality import TIMEOUT_KIND, QualitySettings
from ..bench.run import BenchSettings
from ..bench.sweep import SweepSettings
from ..bench.target import BenchTarget, Thresholds, for_lane, for_url
from ..bench.tokens import LocalTokenizer
from .progress import quiet, wants_bar
from .render import echo_json, load_inventory
from .values import POSITIVE_SECONDS

DEFAULT_URL_OUT = Path("sparkfleet-reports")
POSITIVE = click.IntRange(min=1)


class IntList(click.ParamType):
    """'512,2048' or '512 2048' → (512, 2048), each at least `minimum` (checked before any request)."""

    name = "ints"

    def __init__(self, minimum: int) -> None:
        self.minimum = minimum

    def convert(self, value, param, ctx):  # type: ignore[no-untyped-def]
        if isinstance(value, tuple):
            return value
        try:
            items = tuple(int(x) for x in str(value).replace(",", " ").split())
        except ValueError:
            self.fail(f"expected integers, got {value!r}", param, ctx)
        if not items:
            self.fail("expected at least one integer", param, ctx)
        bad = [x for x in items if x < self.minimum]
        if bad:
            self.fail(f"{bad[0]} is below {self.minimum}", param, ctx)
        return items


# A report folder to read: one that does not exist is a mistake, not an empty history.
REPORT_DIR = click.Path(exists=True, file_okay=False, path_type=Path)


def _pick_target(
    ctx: click.Context, lane: str | None, url: str | None, out: Path | None, gateway: bool = False
) -> BenchTarget:
    if gateway:
        if lane or url:
            raise SparkfleetError("--gateway takes no LANE or --url", hint="sparkfleet bench --gateway")
        from ..bench.target import for_gateway
        from ..serving.gateway import state_dir_in_force

        def event(msg: str) -> None:
            click.echo(f"· {msg}", err=True)

        return for_gateway(state_dir_in_force(), out or DEFAULT_URL_OUT, event)
    if bool(lane) == bool(url):
        raise SparkfleetError(
            "name a LANE or give --url (exactly one)",
            hint="e.g. `sparkfleet bench dsv41-flash-exl3-2x` or `--url http://127.0.0.1:30000/v1`",
        )
    if url:
        return for_url(url, out or DEFAULT_URL_OUT)
    target = for_lane(load_inventory(ctx), lane or "")
    if out is not None:
        target = dataclasses.replace(target, reports_dir=out)
    return target


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


# -- smoke ------------------------------------------------------------------------------------------
@click.command()
@click.argument("lane", required=False)
@click.option(
    "--url", help="Any OpenAI-compatible base URL instead of a lane (e.g. http://127.0.0.1:30000/v1)."
)
@click.option("--model", show_default="the first from /v1/models", help="Model name.")
@click.option(
    "--max-tokens",
    type=POSITIVE,
    show_default="the recipe's smoke.max_tokens, else 2048",
    help="Token budget per answer, reasoning included.",
)
@click.option(
    "--timeout",
    type=POSITIVE_SECONDS,
    default=120.0,
    show_default=True,
    help="Deadline for each whole request (connect to last byte).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def smoke(
    ctx: click.Context,
    lane: str | None,
    url: str | None,
    model: str | None,
    max_tokens: int | None,
    timeout: float,
    as_json: bool,
) -> None:
    """Ask the recipe's smoke prompts (temperature 0) and check the answers (not the reasoning).

    \b
    Examples:
      sparkfleet smoke demo-exl3-2x
      sparkfleet smoke demo-exl3-2x --json
      sparkfleet smoke --url http://127.0.0.1:30000/v1 --max-tokens 4096   # real fleet: any server
    """
    target = _pick_target(ctx, lane, url, None)  # smoke writes no report
    result = session.smoke_target(target, model=model, timeout=timeout, max_tokens=max_tokens)
    ok, outcomes = result.ok, result.cases
    if as_json:
        echo_json(result)
    else:
        for o in outcomes:
            took = f"{o.latency_s:.2f} s" if o.latency_s is not None else "-"
            mark = click.style("ok  ", fg="green") if o.passed else click.style("FAIL", fg="red")
            answer = (o.answer or "").strip().replace("\n", " ")[:60]
            click.echo(
                f"{mark} {o.prompt} → {answer!r} ({o.finish_reason}, {took})"
                + ("" if o.passed else f": {o.problem}")
            )
        click.echo(
            f"smoke {'passed' if ok else 'FAILED'}: {sum(o.passed for o in outcomes)}/{len(outcomes)} "
            f"at {target.url} ({result.model})"
        )
    ctx.exit(ExitCode.OK if ok else ExitCode.SHORTFALL)


# -- bench ------------------------------------------------------------------------------------------
def _csv(values: tuple[int, ...]) -> str:
    return ",".join(map(str, values))


def _dflt(get) -> str:
    """A bench option's default as shown in --help: the full run's value and, if different, --quick's."""
    full, quick = get(BenchSettings()), get(BenchSettings.quick())
    return str(full) if full == quick else f"{full}; {quick} with --quick"


@click.command()
@click.argument("lane", required=False)
@click.option("--url", help="Any OpenAI-compatible base URL instead of a lane.")
@click.option(
    "--gateway", "via_gateway", is_flag=True,
    help="Through `sparkfleet gateway` (its key; the report records its policy and each request's replica).",
)  # fmt: skip
@click.option("--tag", default=None, show_default="bench; quick with --quick", help="Report name tag.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    show_default="recipes/<lane>/reports (a failed or interrupted run: its git-ignored failed/); "
    "./sparkfleet-reports for --url",
    help="Report folder.",
)
@click.option(
    "--save-to-lane",
    is_flag=True,
    help="Write the report into recipes/<lane>/reports (tracked) even if the run failed.",
)
@click.option("--quick", is_flag=True, help="A short run (seconds): small probe, one table row each, c=1,2.")
@click.option("--model", show_default="the first from /v1/models", help="Model name.")
@click.option(
    "--prompt-tokens",
    type=POSITIVE,
    show_default=_dflt(lambda s: s.probe.prompt_tokens),
    help="Decode probe prompt length.",
)
@click.option(
    "--max-tokens",
    type=POSITIVE,
    show_default=_dflt(lambda s: s.probe.max_tokens),
    help="Decode probe output tokens.",
)
@click.option(
    "--pp", type=IntList(1), show_default=_dflt(lambda s: _csv(s.pp)), help="Prefill sizes, e.g. '512,2048'."
)
@click.option(
    "--tg", type=IntList(1), show_default=_dflt(lambda s: _csv(s.tg)), help="Generation sizes, e.g. '128'."
)
@click.option(
    "--depths",
    type=IntList(0),
    show_default=_dflt(lambda s: _csv(s.depths)),
    help="Context depths, e.g. '0,4096'.",
)
@click.option(
    "--runs", type=POSITIVE, show_default=_dflt(lambda s: s.table_runs), help="Repetitions per pp/tg row."
)
@click.option(
    "--concurrency", type=IntList(1), show_default=_dflt(lambda s: _csv(s.sweep.levels)), help="Sweep levels."
)
@click.option(
    "--requests",
    type=POSITIVE,
    show_default=_dflt(lambda s: s.sweep.requests_per_level),
    help="Requests per sweep level (at least the level).",
)
@click.option(
    "--sweep-prompt-tokens",
    type=POSITIVE,
    show_default=_dflt(lambda s: s.sweep.prompt_tokens),
    help="Sweep prompt length.",
)
@click.option(
    "--sweep-max-tokens",
    type=POSITIVE,
    show_default=_dflt(lambda s: s.sweep.max_tokens),
    help="Sweep output tokens.",
)
@click.option(
    "--quality/--no-quality",
    default=None,
    show_default="quality; no-quality with --quick",
    help="Run tool-eval-bench.",
)
@click.option(
    "--smoke/--no-smoke",
    "with_smoke",
    default=True,
    show_default=True,
    help="Ask the smoke questions first; --no-smoke benches a model that cannot answer them (a base or "
    "draft model).",
)
@click.option("--quality-full", is_flag=True, help="All tool-eval-bench scenarios, not the core 15.")
@click.option("--quality-scenarios", help="Only these scenario ids, e.g. 'TC-01,TC-07'.")
@click.option(
    "--trust-measured", is_flag=True,
    help="The report's roofline uses a measured figure even under 25 % or over 150 % of the declared one.",
)  # fmt: skip
@click.option(
    "--tokenizer",
    type=click.Path(exists=True, path_type=Path),
    help="Local tokenizer.json (or folder) for servers that report no usage.",
)
@click.option(
    "--timeout",
    type=POSITIVE_SECONDS,
    default=600.0,
    show_default=True,
    help="Deadline for each whole request (connect to last byte).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def bench(
    ctx: click.Context,
    lane: str | None,
    url: str | None,
    via_gateway: bool,
    tag: str | None,
    out: Path | None,
    save_to_lane: bool,
    quick: bool,
    model: str | None,
    prompt_tokens: int | None,
    max_tokens: int | None,
    pp: tuple[int, ...] | None,
    tg: tuple[int, ...] | None,
    depths: tuple[int, ...] | None,
    runs: int | None,
    concurrency: tuple[int, ...] | None,
    requests: int | None,
    sweep_prompt_tokens: int | None,
    sweep_max_tokens: int | None,
    quality: bool | None,
    with_smoke: bool,
    quality_full: bool,
    quality_scenarios: str | None,
    trust_measured: bool,
    tokenizer: Path | None,
    timeout: float,
    as_json: bool,
) -> None:
    """Decode probe, pp/tg table, concurrency sweep and quality; writes a report (JSON, Markdown, PNG).

    An API key is read from $SPARKFLEET_API_KEY (or the recipe's [bench] api_key_env).

    \b
    Examples:
      sparkfleet bench demo-exl3-2x --quick --tag first-look
      sparkfleet bench demo-exl3-2x --quick --concurrency 1,4 --json
      sparkfleet bench dsv41-flash-exl3-2x       # real fleet: the whole bench, about an hour
      sparkfleet bench --url http://127.0.0.1:30000/v1 --no-quality   # real fleet: any server
    """
    if (url or via_gateway) and save_to_lane:
        raise SparkfleetError(
            "--save-to-lane needs a LANE: a --url run has no lane", hint="use --out DIR to choose a folder"
        )
    target = _pick_target(ctx, lane, url, None, gateway=via_gateway)
    assert target.reports_dir is not None
    session.writable_reports_dir(out if out is not None else target.reports_dir)  # before any request
    base = BenchSettings.quick() if quick else BenchSettings()
    sweep = SweepSettings(
        levels=concurrency or base.sweep.levels,
        requests_per_level=requests or base.sweep.requests_per_level,
        prompt_tokens=sweep_prompt_tokens or base.sweep.prompt_tokens,
        max_tokens=sweep_max_tokens or base.sweep.max_tokens,
    )
    want_quality = (not quick) if quality is None else quality
    quality_note = None
    if quality is None and want_quality and target.quality_skip:
        want_quality = False
        quality_note = (
            f"quality not run: {target.quality_skip} (the recipe's [bench.quality] skip; "
            "--quality runs it anyway)"
        )
    request_s = target.quality_request_timeout_s or QualitySettings.request_timeout_s
    settings = BenchSettings(
        probe=DecodeProbe(prompt_tokens or base.probe.prompt_tokens, max_tokens or base.probe.max_tokens),
        pp=pp or base.pp,
        tg=tg or base.tg,
        depths=depths or base.depths,
        table_runs=runs or base.table_runs,
        sweep=sweep,
        quality=QualitySettings(
            short=not quality_full,
            scenarios=tuple(s for s in (quality_scenarios or "").replace(",", " ").split()),
            request_timeout_s=request_s,
        )
        if want_quality
        else None,
        smoke=with_smoke,
        is_quick=base.is_quick,
    )
    tag = tag or ("quick" if quick else "bench")
    counter = LocalTokenizer(tokenizer) if tokenizer else _staged_counter(target)
    inv = load_inventory(ctx) if target.lane else None
    fingerprint = session.lane_fingerprinter(inv, target.lane) if inv is not None and target.lane else None

    def go(progress: RichBenchProgress | None = None) -> session.Recorded:
        return session.bench(
            target,
            settings,
            tag,
            inv=inv,
            out=out,
            save_to_lane=save_to_lane,
            trust_measured=trust_measured,
            model=model,
            tokenizer=counter,
            progress=progress,
            timeout=timeout,
            fingerprint=fingerprint,
            quality_note=quality_note,
        )

    if wants_bar(as_json):
        with RichBenchProgress() as bar:
            done = go(bar)
    else:
        done = go(None if as_json or quiet() else LineBenchProgress())  # type: ignore[arg-type]
    run, paths, comparison = done.run, done.paths, done.comparison
    for warning in done.warnings:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        echo_json(
            {
                "status": run.status,
                "failures": run.failures,
                "report": paths,
                "metrics": done.metrics,
                "token_sources": run.token_sources,
                "comparison": comparison,
            }
        )
    else:
        _print_bench(run, paths, done.metrics, comparison)
    if run.status == "interrupted":
        click.secho(f"interrupted: the report of what was measured is {paths.json}", fg="yellow", err=True)
        ctx.exit(ExitCode.INTERRUPTED)
    # a refused baseline comparison (other settings or hosts) is printed, not a failed bench
    ctx.exit(ExitCode.SHORTFALL if done.failed else ExitCode.OK)


def _staged_counter(target: BenchTarget) -> LocalTokenizer | None:
    """The model's own tokenizer from the staged hub, when there is one and `tokenizers` is installed."""
    counter, why_not = session.staged_counter(target)
    if why_not:
        click.echo(f"note: {why_not}", err=True)
    return counter


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


def _print_bench(run, paths: reports.ReportPaths, metrics: dict, comparison) -> None:
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
        _print_comparison(comparison)
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


# -- report -----------------------------------------------------------------------------------------
@click.group("report")
def report() -> None:
    """Bench report history: list a lane's reports, compare two, or compare against the baseline."""


def _reports_dir(
    ctx: click.Context, lane: str | None, directory: Path | None
) -> tuple[Path, Thresholds, str | None]:
    if directory is not None:
        return directory, Thresholds(), None
    if lane:
        target = for_lane(load_inventory(ctx), lane)
        assert target.reports_dir is not None
        return target.reports_dir, target.thresholds, target.baseline
    raise SparkfleetError("name a LANE (or --dir with a report folder)")


@report.command("list")
@click.argument("lane", required=False)
@click.option("--dir", "directory", type=REPORT_DIR, help="A report folder.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def list_(ctx: click.Context, lane: str | None, directory: Path | None, as_json: bool) -> None:
    """A lane's reports, oldest first.

    \b
    Examples:
      sparkfleet report list demo-exl3-2x
      sparkfleet report list demo-exl3-2x --json
    """
    folder, _, baseline = _reports_dir(ctx, lane, directory)
    items = reports.list_reports(folder)
    if as_json:
        echo_json({"dir": folder, "baseline": baseline, "reports": items})
        return
    if not items:
        click.echo(f"no reports in {folder}")
        return
    for r in items:
        mark = " (baseline)" if baseline and r.name == baseline else ""
        decode = f"{r.decode_tps:.1f} tok/s" if r.decode_tps is not None else "—"
        score = f"quality {r.quality_score:.0f}" if r.quality_score is not None else ""
        status = r.status if r.status == "ok" else f"✕ {r.status}"
        click.echo(f"{r.name}  {status:<13} decode {decode:<12} {score}{mark}")


def _print_comparison(c: reports.Comparison) -> None:
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


@report.command("html")
@click.argument("lane")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    show_default="./sparkfleet-reports/<lane>.html",
    help="Page to write.",
)
@click.option("--dir", "directory", type=REPORT_DIR, help="A report folder.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def html(ctx: click.Context, lane: str, out: Path | None, directory: Path | None, as_json: bool) -> None:
    """One static, self-contained history page for LANE: charts over time, the runs, the baseline.

    No network and no external assets: the page opens from a file; links to each report are
    relative to the page.

    \b
    Examples:
      sparkfleet report html demo-exl3-2x
      sparkfleet report html demo-exl3-2x --out history.html
    """
    from ..bench.report.html import write_page

    folder, _, baseline = _reports_dir(ctx, lane, directory)
    out = out or reports.SCRATCH_DIR / f"{reports.safe_tag(lane)}.html"
    session.writable_reports_dir(out.parent)  # before reading every report
    page = write_page(lane, folder, baseline, out)
    if as_json:
        echo_json(page)
    else:
        click.echo(f"{page.reports} reports ({page.ok} ok) → {page.path}")


def _lane_report_dirs(ctx: click.Context) -> dict[str, Path]:
    """lane -> its reports folder, for every lane of the fleet (none outside a fleet checkout)."""
    try:
        inv = load_inventory(ctx)
    except SparkfleetError:
        return {}
    out = {}
    for lane in sorted(inv.lanes):
        with contextlib.suppress(SparkfleetError):
            folder = for_lane(inv, lane).reports_dir
            if folder is not None:
                out[lane] = folder
    return out


def _lane_baseline(
    ctx: click.Context, lane: str | None, new_ref: str, folder: Path | None, as_json: bool
) -> str | None:
    """With no [bench] baseline declared: the report that made the lane's last good generation
    good. A lane with no good generation yet has nothing to fall behind: said here, and None."""
    from ..bench.gate import baseline_of

    hint = 'give two reports, or declare [bench] baseline = "<report name>" in the recipe'
    if not lane:
        raise SparkfleetError("no baseline to compare against", hint=hint)
    inv = load_inventory(ctx)
    base = baseline_of(for_lane(inv, lane), inv.root)
    if base.path is not None:
        return str(base.path)
    if not base.first_night:
        raise SparkfleetError(f"no baseline to compare against: {base.said}", hint=hint)
    newest = reports.resolve(new_ref, folder).stem
    why = f"{lane} has {base.said}: nothing for {newest} to fall behind"
    if as_json:
        echo_json({"ok": True, "compared": False, "base": None, "new": newest, "why": why})
    else:
        click.echo(f"{why}; `sparkfleet promote {lane}` makes its generation the first good, the baseline "
                   "of later reports")  # fmt: skip
    return None


@report.command("compare")
@click.argument("refs", nargs=-1)
@click.option("--lane", help="Resolve names in this lane's reports; compare against its declared baseline.")
@click.option("--dir", "directory", type=REPORT_DIR, help="A report folder.")
@click.option(
    "--force", is_flag=True, help="Compare even when settings or host fingerprints differ (marked)."
)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def compare(
    ctx: click.Context,
    refs: tuple[str, ...],
    lane: str | None,
    directory: Path | None,
    force: bool,
    as_json: bool,
) -> None:
    """Compare reports: `A B` (A is the base), `A` against the lane's baseline, or none: latest vs baseline.

    The baseline is the recipe's [bench] baseline, else the report that made the lane's last good
    generation good; a lane with neither (before its first promote) has nothing to compare yet and
    says so and exits 0 (ok).

    Exits 5 (refused) when the two measured different things — other settings (probe size, depths,
    quick…) or other host fingerprints (kernel, driver, CUDA, NCCL, firmware, clocks, image) — unless
    --force, even if the newer run failed too; else 1 (shortfall) when the newer report failed or
    regressed past the lane's [bench.thresholds], and 5 (refused) when the base report failed.

    \b
    Examples:
      sparkfleet report compare demo first-look --lane demo-exl3-2x
      sparkfleet report compare demo first-look --json
      sparkfleet report compare --lane dsv41-flash-exl3-2x   # real fleet: latest against its baseline
    """
    if len(refs) > 2:
        raise SparkfleetError("compare takes at most two reports")
    folder, thresholds, baseline = (None, Thresholds(), None)
    if lane or directory:
        folder, thresholds, baseline = _reports_dir(ctx, lane, directory)
    if len(refs) == 2:
        base_ref, new_ref = refs
    else:
        new_ref = refs[0] if refs else "latest"
        base_ref = baseline or _lane_baseline(ctx, lane, new_ref, folder, as_json)
        if base_ref is None:
            return  # nothing to compare yet (said): exit 0
    if folder is None:  # names, without --lane: whichever of the fleet's lanes holds each
        lanes = _lane_report_dirs(ctx)
        base_path, new_path = reports.resolve_across(base_ref, lanes), reports.resolve_across(new_ref, lanes)
    else:
        base_path, new_path = reports.resolve(base_ref, folder), reports.resolve(new_ref, folder)
    result = reports.compare(
        reports.load_document(base_path),
        reports.load_document(new_path),
        thresholds,
        base_path.stem,
        new_path.stem,
        force=force,
    )
    if as_json:
        echo_json({"ok": result.ok, **{k: v for k, v in vars(result).items()}})
    else:
        _print_comparison(result)
    ctx.exit(result.exit_code)
