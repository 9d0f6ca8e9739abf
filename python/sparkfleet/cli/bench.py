"""`sparkfleet smoke`, `sparkfleet bench`, `sparkfleet report list|compare`.

Exit codes: 0 all good; 1 a smoke answer was wrong, a bench step failed (the report says which) or
a comparison found a regression; 2 a usage or inventory error. An API key, when the server wants one,
comes from $SPARKFLEET_API_KEY (or the variable the recipe's [bench] api_key_env names), never from
the command line, and never reaches a report.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .. import report as reports
from ..bench.client import Endpoint, discover_model
from ..bench.probes import DecodeProbe, run_smoke_case
from ..bench.quality import QualitySettings
from ..bench.run import BenchSettings, run_bench
from ..bench.sweep import SweepSettings
from ..bench.target import BenchTarget, Thresholds, for_lane, for_url
from ..bench.tokens import LocalTokenizer
from ..errors import SparkfleetError
from .progress import wants_bar
from .render import echo_json, load_inventory

DEFAULT_URL_OUT = Path("sparkfleet-reports")


def writable_reports_dir(folder: Path) -> Path:
    """Refuse, before a bench runs, a reports folder that cannot be written (creates nothing).

    `nix run .#bench` starts sparkfleet with the flake source as its fleet root: a store path,
    read-only, so recipes/<lane>/reports there is never a place for a report.
    """
    hint = "pass --out DIR (e.g. --out ./reports), or run from a writable checkout (--root)"
    resolved = folder.absolute()
    if resolved.parts[:3] == ("/", "nix", "store"):
        raise SparkfleetError(f"reports folder {folder} is inside the Nix store (read-only)", hint=hint)
    existing = next((p for p in (resolved, *resolved.parents) if p.exists()), Path("/"))
    if not os.access(existing, os.W_OK):
        why = f"reports folder {folder} is read-only ({existing} cannot be written)"
        raise SparkfleetError(why, hint=hint)
    return folder


def _target(ctx: click.Context, lane: str | None, url: str | None, out: Path | None) -> BenchTarget:
    target = _pick_target(ctx, lane, url, out)
    assert target.reports_dir is not None
    writable_reports_dir(target.reports_dir)
    return target


def _pick_target(ctx: click.Context, lane: str | None, url: str | None, out: Path | None) -> BenchTarget:
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


# -- smoke ------------------------------------------------------------------------------------------
@click.command()
@click.argument("lane", required=False)
@click.option(
    "--url", help="Any OpenAI-compatible base URL instead of a lane (e.g. http://127.0.0.1:30000/v1)."
)
@click.option("--model", help="Model name (default: the first from /v1/models).")
@click.option("--timeout", type=float, default=120.0, show_default=True, help="Seconds per request.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def smoke(
    ctx: click.Context, lane: str | None, url: str | None, model: str | None, timeout: float, as_json: bool
) -> None:
    """Ask the recipe's smoke prompts (temperature 0) and check answers and finish_reason."""
    target = _pick_target(ctx, lane, url, None)  # smoke writes no report
    endpoint = discover_model(Endpoint(target.url, model, target.api_key(), timeout))
    outcomes = [run_smoke_case(endpoint, case) for case in target.smoke]
    ok = all(o.passed for o in outcomes)
    if as_json:
        echo_json(
            {"ok": ok, "url": target.url, "lane": target.lane, "model": endpoint.model, "cases": outcomes}
        )
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
            f"at {target.url} ({endpoint.model})"
        )
    ctx.exit(0 if ok else 1)


# -- bench ------------------------------------------------------------------------------------------
def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.replace(",", " ").split())
    except ValueError:
        raise click.BadParameter(f"expected integers, got {text!r}") from None


@click.command()
@click.argument("lane", required=False)
@click.option("--url", help="Any OpenAI-compatible base URL instead of a lane.")
@click.option("--tag", default=None, help="Report name tag (default: bench, or quick with --quick).")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Report folder (default: recipes/<lane>/reports, or ./sparkfleet-reports with --url).",
)
@click.option("--quick", is_flag=True, help="A short run (seconds): small probe, one table row each, c=1,2.")
@click.option("--model", help="Model name (default: the first from /v1/models).")
@click.option("--prompt-tokens", type=int, help="Decode probe prompt length [487].")
@click.option("--max-tokens", type=int, help="Decode probe output tokens [400].")
@click.option("--pp", help="Prefill sizes, e.g. '512,2048'.")
@click.option("--tg", help="Generation sizes, e.g. '128'.")
@click.option("--depths", help="Context depths, e.g. '0,4096'.")
@click.option("--runs", type=int, help="Repetitions per pp/tg row [2].")
@click.option("--concurrency", help="Sweep levels, e.g. '1,2,4,8,16'.")
@click.option("--requests", type=int, help="Requests per sweep level (at least the level) [16].")
@click.option("--sweep-prompt-tokens", type=int, help="Sweep prompt length [256].")
@click.option("--sweep-max-tokens", type=int, help="Sweep output tokens [128].")
@click.option(
    "--quality/--no-quality", default=None, help="Run tool-eval-bench (default: yes, no with --quick)."
)
@click.option("--quality-full", is_flag=True, help="All tool-eval-bench scenarios, not the core 15.")
@click.option("--quality-scenarios", help="Only these scenario ids, e.g. 'TC-01,TC-07'.")
@click.option(
    "--tokenizer",
    type=click.Path(exists=True, path_type=Path),
    help="Local tokenizer.json (or folder) for servers that report no usage.",
)
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds per request.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def bench(
    ctx: click.Context,
    lane: str | None,
    url: str | None,
    tag: str | None,
    out: Path | None,
    quick: bool,
    model: str | None,
    prompt_tokens: int | None,
    max_tokens: int | None,
    pp: str | None,
    tg: str | None,
    depths: str | None,
    runs: int | None,
    concurrency: str | None,
    requests: int | None,
    sweep_prompt_tokens: int | None,
    sweep_max_tokens: int | None,
    quality: bool | None,
    quality_full: bool,
    quality_scenarios: str | None,
    tokenizer: Path | None,
    timeout: float,
    as_json: bool,
) -> None:
    """Decode probe, pp/tg table, concurrency sweep and quality; writes a report (JSON, Markdown, PNG).

    An API key is read from $SPARKFLEET_API_KEY (or the recipe's [bench] api_key_env)."""
    target = _target(ctx, lane, url, out)
    base = BenchSettings.quick() if quick else BenchSettings()
    sweep = SweepSettings(
        levels=_ints(concurrency) if concurrency else base.sweep.levels,
        requests_per_level=requests or base.sweep.requests_per_level,
        prompt_tokens=sweep_prompt_tokens or base.sweep.prompt_tokens,
        max_tokens=sweep_max_tokens or base.sweep.max_tokens,
    )
    want_quality = (not quick) if quality is None else quality
    settings = BenchSettings(
        probe=DecodeProbe(prompt_tokens or base.probe.prompt_tokens, max_tokens or base.probe.max_tokens),
        pp=_ints(pp) if pp else base.pp,
        tg=_ints(tg) if tg else base.tg,
        depths=_ints(depths) if depths else base.depths,
        table_runs=runs or base.table_runs,
        sweep=sweep,
        quality=QualitySettings(
            short=not quality_full,
            scenarios=tuple(s for s in (quality_scenarios or "").replace(",", " ").split()),
        )
        if want_quality
        else None,
    )
    tag = tag or ("quick" if quick else "bench")
    counter = LocalTokenizer(tokenizer) if tokenizer else None

    def go(progress: RichBenchProgress | None = None):
        return run_bench(
            target, settings, tag, model=model, tokenizer=counter, progress=progress, timeout=timeout
        )

    if wants_bar(as_json):
        with RichBenchProgress() as bar:
            run = go(bar)
    else:
        run = go()
    assert target.reports_dir is not None
    paths = reports.write_report(run, target.reports_dir)
    comparison = None
    if target.baseline and run.status == "ok":
        try:
            base_path = reports.resolve(target.baseline, target.reports_dir)
            comparison = reports.compare(
                reports.load_document(base_path),
                reports.load_document(paths.json),
                target.thresholds,
                base_path.stem,
                paths.json.stem,
            )
        except SparkfleetError as exc:
            click.echo(f"warning: baseline {target.baseline!r} not compared: {exc.message}", err=True)
    doc_metrics = reports.key_metrics(reports.to_document(run))
    if as_json:
        echo_json(
            {
                "status": run.status,
                "failures": run.failures,
                "report": paths,
                "metrics": doc_metrics,
                "token_sources": run.token_sources,
                "comparison": comparison,
            }
        )
    else:
        _print_bench(run, paths, doc_metrics, comparison)
    failed = run.status != "ok" or (comparison is not None and not comparison.ok)
    ctx.exit(1 if failed else 0)


def _print_bench(run, paths: reports.ReportPaths, metrics: dict, comparison) -> None:
    color = "green" if run.status == "ok" else "red"
    click.secho(f"bench {run.status.upper()}: {run.lane or run.url} ({run.model}), tag {run.tag}", fg=color)
    for failure in run.failures:
        click.secho(f"  failed: {failure}", fg="red")
    probe = run.decode_probe.metrics if run.decode_probe else None
    if probe and probe.ok and probe.decode_tps is not None and probe.ttft_s is not None:
        click.echo(
            f"  decode probe: {probe.decode_tps:.1f} tok/s, TTFT {probe.ttft_s * 1000:.0f} ms "
            f"({probe.completion_tokens} tokens, {probe.chunks} chunks, tokens from {probe.token_source})"
        )
    for row in run.table:
        value = (
            f"{row.tps_mean:.1f} ± {row.tps_std:.1f} t/s"
            if row.tps_mean is not None
            else f"FAILED {row.error}"
        )
        click.echo(f"  {row.test:>7} @ d{row.depth:<5} {value}")
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
    if run.quality:
        q = run.quality
        click.echo(
            f"  quality: {q.score:.0f}/100 ({q.points}/{q.max_points}), {len(q.failed_scenarios)} not passed"
            if q.status == "ok"
            else f"  quality: {q.status}: {q.error}"
        )
    if comparison is not None:
        _print_comparison(comparison)
    click.echo(f"report: {paths.json}")
    click.echo(f"report: {paths.markdown}")
    if paths.png:
        click.echo(f"report: {paths.png}")


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
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path), help="A report folder.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def list_(ctx: click.Context, lane: str | None, directory: Path | None, as_json: bool) -> None:
    """A lane's reports, oldest first."""
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
        click.echo(f"{r.name}  {r.status:<6} decode {decode:<12} {score}{mark}")


def _print_comparison(c: reports.Comparison) -> None:
    click.echo(f"compare {c.base} → {c.new}")
    for d in c.deltas:
        change = f"{d.change_pct:+.1f}%" if d.change_pct is not None else "n/a"
        base = f"{d.base:.4g}" if d.base is not None else "—"
        new = f"{d.new:.4g}" if d.new is not None else "—"
        flag = click.style(" REGRESSION", fg="red") if d.regression else ""
        click.echo(f"  {d.name:<22} {base:>10} → {new:>10}  {change:>8}  (limit {d.limit}){flag}")
    if c.ok:
        click.secho("no regression", fg="green")
    for r in c.regressions:
        click.secho(f"regression: {r}", fg="red")


@report.command("compare")
@click.argument("refs", nargs=-1)
@click.option("--lane", help="Resolve names in this lane's reports; compare against its declared baseline.")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path), help="A report folder.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def compare(
    ctx: click.Context, refs: tuple[str, ...], lane: str | None, directory: Path | None, as_json: bool
) -> None:
    """Compare reports: `A B` (A is the base), `A` against the lane's baseline, or none: latest vs baseline.

    Exits 1 when the newer report failed or regressed past the lane's [bench.thresholds]."""
    if len(refs) > 2:
        raise SparkfleetError("compare takes at most two reports")
    folder, thresholds, baseline = (None, Thresholds(), None)
    if lane or directory:
        folder, thresholds, baseline = _reports_dir(ctx, lane, directory)
    if len(refs) == 2:
        base_ref, new_ref = refs
    else:
        if not baseline:
            raise SparkfleetError(
                "no baseline to compare against",
                hint='give two reports, or declare [bench] baseline = "<report name>" in the recipe',
            )
        base_ref, new_ref = baseline, (refs[0] if refs else "latest")
    base_path, new_path = reports.resolve(base_ref, folder), reports.resolve(new_ref, folder)
    result = reports.compare(
        reports.load_document(base_path),
        reports.load_document(new_path),
        thresholds,
        base_path.stem,
        new_path.stem,
    )
    if as_json:
        echo_json({"ok": result.ok, **{k: v for k, v in vars(result).items()}})
    else:
        _print_comparison(result)
    ctx.exit(0 if result.ok else 1)
