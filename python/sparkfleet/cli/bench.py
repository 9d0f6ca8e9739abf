"""`sparkfleet smoke`, `sparkfleet bench` (its reports are read with `sparkfleet report`).

Exit codes: 0 all good; 1 a smoke answer was wrong, a bench step failed (the report says which) or
the comparison with the baseline found a regression; 2 a usage or inventory error. An API key,
when the server wants one, comes from $SPARKFLEET_API_KEY (or the variable the recipe's [bench]
api_key_env names), never from the command line, and never reaches a report.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import click

from ..base.errors import ExitCode, SparkfleetError
from ..bench import session
from ..bench.choices import BenchChoices, bench_settings
from ..bench.settings import BenchSettings
from ..bench.target import BenchTarget, pick_target
from ..bench.tokens import LocalTokenizer
from .benchview import LineBenchProgress, RichBenchProgress, print_bench
from .progress import quiet, wants_bar
from .render import echo_json, load_inventory
from .values import POSITIVE_SECONDS

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


def _pick_target(
    ctx: click.Context, lane: str | None, url: str | None, out: Path | None, gateway: bool = False
) -> BenchTarget:
    def event(msg: str) -> None:
        click.echo(f"· {msg}", err=True)

    return pick_target(partial(load_inventory, ctx), lane, url, out, gateway, event)


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
    choices = BenchChoices(
        quick, prompt_tokens, max_tokens, pp, tg, depths, runs, concurrency, requests,
        sweep_prompt_tokens, sweep_max_tokens, quality, with_smoke, quality_full, quality_scenarios,
    )  # fmt: skip
    settings, quality_note = bench_settings(choices, target)
    tag = choices.tag(tag)
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
        print_bench(run, paths, done.metrics, comparison)
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
