"""`sparkfleet demo`: the main job on an embedded default fleet, start to finish."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from ..base.errors import ExitCode, SparkfleetError
from ..base.selfexec import module_argv
from ..demo.fleet import DEMO_LANE, claim_workdir, clear_workdir, write_demo_fleet
from ..engram import pack as engram_pack
from ..fleet import inventory
from ..fleet.inventory import state_dir_of
from ..roofline.stagebound import staging_bound_of_run
from ..stage import execute
from ..stage.local import with_io_bound
from ..stage.targets import requests_for_host
from ..stage.verify import verify_note
from .progress import RichStageProgress, wants_bar
from .render import echo_json, human_bytes
from .stagelines import print_stage_run
from .values import WRITABLE_DIR


@dataclass
class DemoLog:
    """What the demo did, step by step: said as it goes (on stderr with --json, so that stdout is
    one JSON document) and kept for the --json summary."""

    as_json: bool
    steps: list[dict] = field(default_factory=list)

    def say(self, line: str) -> None:
        click.echo(line, err=self.as_json)

    def step(self, name: str, ok: bool, **detail: Any) -> bool:
        self.steps.append({"step": name, "ok": ok, **detail})
        return ok


def _stage_host(inv, host: str, jobs: int, log: DemoLog, name: str) -> bool:
    requests = requests_for_host(inv, host, DEMO_LANE)
    bar = RichStageProgress() if wants_bar(log.as_json) else None
    with bar if bar else contextlib.nullcontext():
        run = execute.stage(requests, jobs=jobs, reserve_bytes=inv.host(host).reserve_bytes, progress=bar)
    summary = with_io_bound(run.to_dict(), requests, state_dir_of(inv.host(host)), staging_bound_of_run)
    if not log.as_json:
        print_stage_run(summary, prefix="  ")
    return log.step(name, run.ok, host=host, run=summary)


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


def _smoke_and_bench(root: Path, log: DemoLog) -> bool:
    """While the demo lane serves: the recipe's smoke prompts, then a quick bench with its report."""
    ok = True
    for verb in (["smoke", DEMO_LANE], ["bench", DEMO_LANE, "--quick", "--tag", "demo"]):
        log.say(f"sparkfleet {' '.join(verb)}:")
        argv = module_argv("sparkfleet", "--root", str(root), *verb, *(["--json"] if log.as_json else []))
        proc = subprocess.run(
            argv, stdout=subprocess.PIPE, stderr=None if log.as_json else subprocess.STDOUT, text=True,
            timeout=600, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if log.as_json:  # its own JSON document goes into the summary; its progress went to stderr
            log.step(verb[0], proc.returncode == 0, result=json.loads(proc.stdout or "null"))
        else:
            for line in proc.stdout.splitlines():  # one stream: progress lines stay in order
                log.say(f"  {line}")
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


def _clear_previous(workdir: Path, fresh: bool, log: DemoLog) -> None:
    """Take `workdir` for the demo (refused, changing nothing, unless it is new, empty or carries the
    demo's marker), stop the lanes a previous demo there still runs (by its records), and with
    `fresh` empty it."""
    from ..demo.lane import stop_previous_demo

    claim_workdir(workdir)
    for r in stop_previous_demo(workdir):
        log.say(f"stopped the previous demo's {r['lane']} rank {r.get('rank', '?')} on {r['host']}")
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
    "--shard-mib", default=4, show_default=True, type=click.IntRange(1, 1024),
    help="Size of each weight shard in the demo NAS.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print what each step did as one JSON document.")
def demo(workdir: Path | None, fresh: bool, shard_mib: int, as_json: bool) -> None:
    """The whole job on a fleet on this machine: a NAS-like hub cache staged to two hosts, verified.

    Then the offline load, engram packs, a launch of the demo lane, its smoke prompts and a quick
    bench with a report, and a stop. --workdir must be new, empty, or a previous demo's (it carries
    the demo's marker, which the demo writes there first): anything else is refused, and nothing in
    it is stopped, written or removed. A previous demo's lane still running there is stopped first
    (by its records), so its servers never outlive the records that name them. With --json the
    steps are told on stderr and stdout gets one JSON document; exit 1 (shortfall) if any step fell
    short.

    \b
    Examples:
      sparkfleet demo
      sparkfleet demo --workdir .demo --fresh
      sparkfleet demo --json
    """
    log = DemoLog(as_json)
    keep = workdir is not None
    if workdir is not None:
        _clear_previous(workdir, fresh, log)
    elif fresh:
        raise click.UsageError("--fresh needs --workdir (the temp dir is always new)")
    workdir = workdir or Path(tempfile.mkdtemp(prefix="sparkfleet-demo-"))
    try:
        fleet = write_demo_fleet(workdir, shard_bytes=shard_mib * 1024 * 1024, host_kind=_spark_kind())
        inv = inventory.load(fleet.root)
        lane = inv.lane(DEMO_LANE)
        log.say(f"demo fleet: {fleet.root} (NAS hub {fleet.nas_hub})")
        ok = True
        for host in lane.hosts:
            log.say(f"stage {host} → {inv.host(host).local_hub}")
            ok &= _stage_host(inv, host, 2, log, f"stage {host}")
        log.say("rerun on dgx1 (must copy nothing):")
        ok &= _stage_host(inv, lane.hosts[0], 2, log, f"rerun stage {lane.hosts[0]}")
        verified = []
        for host in lane.hosts:
            reports = [r.to_dict() for r in execute.verify(requests_for_host(inv, host, DEMO_LANE))]
            for r in reports:
                log.say(f"verify {host} {r['repo']}: links ok: {r['links_ok']}, dangling: {r['dangling']}, "
                        f"mismatches: {r['mismatches']}, missing: {r['missing']}")  # fmt: skip
            ok &= log.step(f"verify {host}", all(r["ok"] for r in reports), repos=reports)
            verified += reports
        log.say(f"  ({verify_note('sample', verified)})")
        for model in lane.models:
            path = _offline_load(inv.host(lane.hosts[0]).local_hub, model.repo, model.revision)
            log.say(f"offline load {model.repo}: {path}")
            log.step(f"offline load {model.repo}", True, snapshot=path)
        for host in lane.hosts:
            packed = engram_pack.pack(inv, DEMO_LANE, host)
            log.say(
                f"engram pack {host}: rank {packed.rank} of {packed.world}, {packed.action}, "
                f"{len(packed.written)} files ({human_bytes(packed.written_bytes)}) → {packed.out_dir}"
            )
            log.step(f"engram pack {host}", True, result=packed.to_dict())
        if ok:  # serve the staged lane with the process runtime and show readiness (demo/lane.py)
            from ..demo.lane import run_demo_launch

            log.say(f"launch {DEMO_LANE} (process runtime):")
            up = run_demo_launch(inv, DEMO_LANE, log.say, while_up=lambda: _smoke_and_bench(fleet.root, log))
            ok &= log.step("launch, smoke, bench, stop", up)
        if as_json:
            echo_json({"ok": ok, "fleet": fleet.root.resolve() if keep else None, "lane": DEMO_LANE,
                       "steps": log.steps})  # fmt: skip
        elif ok and keep:
            click.secho(next_steps(fleet.root.resolve()), fg="green")
        else:
            click.secho("demo ok" if ok else "demo FAILED", fg="green" if ok else "red")
        if not ok:
            raise SystemExit(ExitCode.SHORTFALL)
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
            log.say("(temp dir removed; `sparkfleet demo --workdir DIR` keeps the trees and reports)")
