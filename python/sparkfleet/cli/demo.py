"""`sparkfleet demo`: the main job on an embedded default fleet, start to finish."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import click

from .. import inventory
from ..demo.fleet import DEMO_LANE, claim_workdir, clear_workdir, write_demo_fleet
from ..engram import pack as engram_pack
from ..errors import ExitCode, SparkfleetError
from ..inventory import state_dir_of
from ..selfexec import module_argv
from ..stage import execute
from ..stage.targets import requests_for_host
from .progress import RichStageProgress, wants_bar
from .render import human_bytes
from .stage import print_stage_run, with_io_bound
from .values import WRITABLE_DIR


def _stage_host(inv, host: str, jobs: int) -> bool:
    requests = requests_for_host(inv, host, DEMO_LANE)
    bar = RichStageProgress() if wants_bar(False) else None
    with bar if bar else contextlib.nullcontext():
        run = execute.stage(requests, jobs=jobs, reserve_bytes=inv.host(host).reserve_bytes, progress=bar)
    print_stage_run(with_io_bound(run.as_dict(), requests, state_dir_of(inv.host(host))), prefix="  ")
    return run.ok


def _offline_load(hub: Path, repo: str, revision: str) -> str:
    """Prove the staged tree loads with huggingface_hub alone, offline."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    from huggingface_hub import snapshot_download

    return snapshot_download(repo, revision=revision, cache_dir=hub, local_files_only=True)


def next_steps(root: Path) -> str:
    """The demo's last line: commands that work as written after it (it stopped its lane)."""
    return (
        f"demo ok — next: `. .venv/bin/activate` (or `make shell`), "
        f"`export SPARKFLEET_ROOT={root}`, then `sparkfleet launch {DEMO_LANE}` (the demo stopped "
        f"its lane), `sparkfleet status {DEMO_LANE}` and the README's night with {DEMO_LANE}"
    )


def _smoke_and_bench(root: Path) -> bool:
    """While the demo lane serves: the recipe's smoke prompts, then a quick bench with its report."""
    ok = True
    for verb in (["smoke", DEMO_LANE], ["bench", DEMO_LANE, "--quick", "--tag", "demo"]):
        click.echo(f"sparkfleet {' '.join(verb)}:")
        proc = subprocess.run(
            module_argv("sparkfleet", "--root", str(root), *verb),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        for line in proc.stdout.splitlines():  # one stream: progress lines stay in order
            click.echo(f"  {line}")
        ok &= proc.returncode == 0
    return ok


def _spark_kind() -> inventory.HostKind | None:
    """The checkout's own host kind (GB10 figures) when the demo runs inside one; else none."""
    try:
        real = inventory.load()
    except SparkfleetError:
        return None
    kinds = {h.kind for h in real.hosts.values() if h.kind}
    return real.host_kinds.get(sorted(kinds)[0]) if kinds else None


def _clear_previous(workdir: Path, fresh: bool) -> None:
    """Take `workdir` for the demo (refused, changing nothing, unless it is new, empty or carries the
    demo's marker), stop the lanes a previous demo there still runs (by its records), and with
    `fresh` empty it."""
    from ..launch.demo import stop_previous_demo

    claim_workdir(workdir)
    for r in stop_previous_demo(workdir):
        click.echo(f"stopped the previous demo's {r['lane']} rank {r.get('rank', '?')} on {r['host']}")
    if fresh:
        clear_workdir(workdir)


@click.command()
@click.option(
    "--workdir",
    type=WRITABLE_DIR,
    show_default="a temp dir, removed after",
    help="Keep the demo here.",
)
@click.option(
    "--fresh",
    is_flag=True,
    help="Start from an empty --workdir: stop what a previous demo there still runs, then empty it.",
)
@click.option(
    "--shard-mib", default=4, type=click.IntRange(min=1), show_default=True,
    help="Size of each weight shard in the demo NAS.",
)  # fmt: skip
def demo(workdir: Path | None, fresh: bool, shard_mib: int) -> None:
    """Build a NAS-like hub cache with the night shift's hard cases, stage it to two hosts, verify.

    --workdir must be new, empty, or a previous demo's (it carries the demo's marker, which the
    demo writes there first): anything else is refused, and nothing in it is stopped, written or
    removed. A previous demo's lane still running there is stopped first (by its records), so its
    servers never outlive the records that name them.

    \b
    Examples:
      sparkfleet demo
      sparkfleet demo --workdir .demo --fresh
    """
    keep = workdir is not None
    if workdir is not None:
        _clear_previous(workdir, fresh)
    elif fresh:
        raise click.UsageError("--fresh needs --workdir (the temp dir is always new)")
    workdir = workdir or Path(tempfile.mkdtemp(prefix="sparkfleet-demo-"))
    try:
        fleet = write_demo_fleet(workdir, shard_bytes=shard_mib * 1024 * 1024, host_kind=_spark_kind())
        inv = inventory.load(fleet.root)
        lane = inv.lane(DEMO_LANE)
        click.echo(f"demo fleet: {fleet.root} (NAS hub {fleet.nas_hub})")
        ok = True
        for host in lane.hosts:
            click.echo(f"stage {host} → {inv.host(host).local_hub}")
            ok &= _stage_host(inv, host, jobs=2)
        click.echo("rerun on dgx1 (must copy nothing):")
        ok &= _stage_host(inv, lane.hosts[0], jobs=2)
        for host in lane.hosts:
            reports = execute.verify(requests_for_host(inv, host, DEMO_LANE))
            for r in reports:
                click.echo(f"verify {host} {r.repo}: {r.line()}, missing: {r.missing}")
                ok &= r.ok
        for model in lane.models:
            path = _offline_load(inv.host(lane.hosts[0]).local_hub, model.repo, model.revision)
            click.echo(f"offline load {model.repo}: {path}")
        for host in lane.hosts:
            packed = engram_pack.pack(inv, DEMO_LANE, host)
            click.echo(
                f"engram pack {host}: rank {packed.rank} of {packed.world}, {packed.action}, "
                f"{len(packed.written)} files ({human_bytes(packed.written_bytes)}) → {packed.out_dir}"
            )
        if ok:  # serve the staged lane with the process runtime and show readiness (launch/demo.py)
            from ..launch.demo import run_demo_launch

            click.echo(f"launch {DEMO_LANE} (process runtime):")
            ok &= run_demo_launch(inv, DEMO_LANE, click.echo, while_up=lambda: _smoke_and_bench(fleet.root))
        if ok and keep:
            click.secho(next_steps(fleet.root.resolve()), fg="green")
        else:
            click.secho("demo ok" if ok else "demo FAILED", fg="green" if ok else "red")
        if not ok:
            raise SystemExit(ExitCode.SHORTFALL)
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
            click.echo("(temp dir removed; `sparkfleet demo --workdir DIR` keeps the trees and reports)")
