"""`sparkfleet engram pack|verify LANE HOST`: per-rank engram packs on the host's NVMe (run on HOST)."""

from __future__ import annotations

import contextlib
import sys

import click

from ..base.errors import ExitCode
from ..engram import layouts as core
from ..engram.verify import verify as verify_packs
from ..fleet.inventory import GIB
from .options import JSON
from .progress import RichStageProgress, wants_bar
from .render import echo_json, human_bytes, load_inventory
from .values import SIZE_GIB


def _echo_sparse(summary: dict) -> None:
    """The sparse-shards layout's own lines: the shard copies, or that this rank reads the shards."""
    if summary["reads_shards"]:
        click.echo(
            f"  layout sparse-shards: rank {summary['rank']} reads its rows from the checkpoint's shards, "
            f"no copy (SPARK_ENGRAM_ROWS={summary['SPARK_ENGRAM_ROWS']})"
        )
        return
    click.echo("  layout sparse-shards: sparse copies of the checkpoint's shards + engram-local.json:")
    for c in summary["copies"]:
        click.echo(
            f"    {c['name']}: {human_bytes(c['size'])} file, {human_bytes(c['data_bytes'])} written "
            f"({', '.join(c['tensors'])})"
        )


@click.group()
def engram() -> None:
    """Cut each rank's rows of the lane's engram tables into local packs, and check them."""


def _source_line(source: dict) -> str:
    where = f"{source['origin']} hub {source['hub']}"
    if source.get("fallback_reason"):
        where += f" (not staged locally: {source['fallback_reason']})"
    return f"source {source['repo']}@{source['commit'][:12]} from {where}"


@engram.command("pack")
@click.argument("lane")
@click.argument("host")
@click.option(
    "--force", is_flag=True, help="Repack even when the directory holds other (or unidentified) packs."
)
@click.option("--full", is_flag=True, help="Check kept packs by sha256 of every byte, not size + sample.")
@click.option("--dry-run", is_flag=True, help="Print the rows and files this host would get; write nothing.")
@click.option(
    "--reserve-gib", type=SIZE_GIB, show_default="the host's reserve_gib", help="Free space to leave."
)
@click.option("--here", is_flag=True, help="Pack on this machine (what HOST runs when asked over ssh).")
@JSON
@click.pass_context
def pack(ctx, lane, host, force, full, dry_run, reserve_gib, here, as_json) -> None:
    """Pack HOST's rows of LANE's engram tables (skipped when its receipt matches and the packs verify).

    The packing runs on HOST (over ssh, with the deployed sparkfleet, like `stage HOST`): its
    staged shards in, its NVMe out. --dry-run reads the tables' headers from here and writes nothing.

    \b
    Examples:
      sparkfleet engram pack demo-exl3-2x dgx1
      sparkfleet engram pack demo-exl3-2x dgx2 --dry-run --json
    """
    inv = load_inventory(ctx)
    if dry_run:
        summary = core.plan(inv, lane, host).summary()
        if as_json:
            echo_json({"dry_run": True, **summary})
            return
        click.echo(f"{lane} on {host}: rank {summary['rank']} of {summary['world']} → {summary['out_dir']}")
        click.echo(_source_line(summary["source"]))
        if summary.get("layout") == "sparse-shards":
            _echo_sparse(summary)
        for f in summary["files"]:
            click.echo(
                f"  {f['name']}: rows [{f['lo']}, {f['hi']}) of {f['total_rows']}, {f['row_bytes']} B/row, "
                f"{human_bytes(f['size'])} ({' + '.join(f['tensors'])})"
            )
        click.echo(f"total {human_bytes(summary['total_bytes'])}")
        click.echo(
            f"every rank of {summary['world']} (rows [N*r/{summary['world']}, N*(r+1)/{summary['world']})):"
        )
        for r in summary["ranks"]:
            ranges = ", ".join(f"layer {t['layer']} [{t['lo']}, {t['hi']})" for t in r["tables"])
            click.echo(f"  rank {r['rank']} {r['host'] or '?'}: {ranges}: {r['bytes'] / GIB:.2f} GiB")
        return
    from ..stage.remote import is_this_host

    if not here and not is_this_host(inv.host(host)):
        from ..engram.remote import pack_on_host

        if not as_json:
            click.echo(f"{host}: packing there over ssh (engram pack {lane} {host} --here)", err=True)
        doc = pack_on_host(inv, lane, host, force=force, full=full, reserve_gib=reserve_gib)
    else:
        reserve = int(reserve_gib * GIB) if reserve_gib is not None else None
        bar = RichStageProgress() if wants_bar(as_json) else None
        with bar if bar else contextlib.nullcontext():
            result = core.pack(inv, lane, host, force=force, full=full, reserve_bytes=reserve, progress=bar)
        doc = result.to_dict()
    if as_json:
        echo_json(doc)
        return
    click.echo(f"{lane} on {host}: rank {doc['rank']} of {doc['world']}, {doc['action']} → {doc['out_dir']}")
    click.echo(_source_line(doc["source"]))
    for name, problem in sorted(doc["repaired_reasons"].items()):
        click.echo(f"  repaired {name}: {problem}")
    click.echo(
        f"written {len(doc['written'])} ({human_bytes(doc['written_bytes'])}), kept {len(doc['kept'])}"
        + (f", removed {len(doc['removed'])} stale" if doc["removed"] else "")
        + (f", swept {doc['temps_swept']} temps" if doc["temps_swept"] else "")
        + (f" in {doc['seconds']:.1f} s, {doc['mb_per_s']:.1f} MB/s" if doc["written"] else "")
    )


@engram.command("verify")
@click.argument("lane")
@click.argument("host")
@click.option("--full", is_flag=True, help="sha256 of every byte, not size + header + sampled digest.")
@JSON
@click.pass_context
def verify(ctx, lane, host, full, as_json) -> None:
    """Check HOST's packs for LANE against their receipt and the lane's tables; exit 1 (shortfall) if not.

    \b
    Examples:
      sparkfleet engram verify demo-exl3-2x dgx2
      sparkfleet engram verify demo-exl3-2x dgx2 --full
    """
    report = verify_packs(load_inventory(ctx), lane, host, full=full)
    if as_json:
        echo_json(report.to_dict())
    else:
        click.echo(
            f"{lane} on {host}: rank {report.rank} of {report.world}, "
            f"{report.mode} verify of {report.out_dir}"
        )
        for name, state in sorted(report.files.items()):
            click.echo(f"  {name}: {state}")
        for problem in report.problems:
            if ": " not in problem or problem.split(": ", 1)[0] not in report.files:
                click.echo(f"  {problem}")
        click.echo("ok" if report.ok else f"{len(report.problems)} problem(s)")
    if not report.ok:
        sys.exit(ExitCode.SHORTFALL)
