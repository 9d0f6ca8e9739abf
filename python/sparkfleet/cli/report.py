"""`sparkfleet report list|compare|html`: a lane's bench report history.

Exit codes: 0 all good; 1 the newer report failed or regressed; 2 a usage or inventory error; 5
(refused) a comparison of reports that measured different things (other settings or host
fingerprints) without --force, or whose base report failed.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import click

from ..bench import report as reports
from ..bench import session
from ..bench.lanereports import NothingToCompare, compare_reports, report_folder
from .benchview import print_comparison
from .render import echo_json, load_inventory

# A report folder to read: one that does not exist is a mistake, not an empty history.
REPORT_DIR = click.Path(exists=True, file_okay=False, path_type=Path)


@click.group("report")
def report() -> None:
    """Bench report history: list a lane's reports, compare two, or compare against the baseline."""


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
    where = report_folder(partial(load_inventory, ctx), lane, directory)
    folder, baseline = where.path, where.baseline
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

    where = report_folder(partial(load_inventory, ctx), lane, directory)
    folder, baseline = where.path, where.baseline
    out = out or reports.SCRATCH_DIR / f"{reports.safe_tag(lane)}.html"
    session.writable_reports_dir(out.parent)  # before reading every report
    page = write_page(lane, folder, baseline, out)
    if as_json:
        echo_json(page)
    else:
        click.echo(f"{page.reports} reports ({page.ok} ok) → {page.path}")


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
    result = compare_reports(partial(load_inventory, ctx), refs, lane, directory, force)
    if isinstance(result, NothingToCompare):  # a lane before its first promote: said, exit 0
        if as_json:
            echo_json({"ok": True, "compared": False, "base": None, "new": result.new, "why": result.why})
        else:
            click.echo(f"{result.why}; `sparkfleet promote {result.lane}` makes its generation the first "
                       "good, the baseline of later reports")  # fmt: skip
        return
    if as_json:
        echo_json({"ok": result.ok, **{k: v for k, v in vars(result).items()}})
    else:
        print_comparison(result)
    ctx.exit(result.exit_code)
