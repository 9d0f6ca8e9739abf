"""Long launches you can see: per-rank boot stage, elapsed, weight-load progress and last log line;
one line per stage change when not on a terminal; Ctrl-C says which ranks still run (or stops
them with --stop-on-interrupt). Process runtime on this machine."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from sparkfleet.base.errors import ExitCode
from sparkfleet.demo.hubfixture import build_nas_hub
from sparkfleet.fleet import inventory
from sparkfleet.launch import lane as lanes
from support.lanefleet import demo_recipe, free_port, write_fleet

# Boot stages seen by polling, and Ctrl-C while a rank boots: time-bound, so make test runs these alone,
# after the parallel part (under parallel load a poll missed a stage and SIGINT raced the boot).
pytestmark = pytest.mark.serial

LOADING = "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.00s/it]"


@pytest.fixture
def fleet(tmp_path):
    nas = build_nas_hub(tmp_path / "nas" / "hub", shard_bytes=16 * 1024)
    spark = {"address": "localhost", "ssh_user": "root", "local_hub": str(tmp_path / "nvme" / "hub"),
             "nas_hub": str(nas.root), "state_dir": str(tmp_path / "state")}  # fmt: skip
    root = write_fleet(
        tmp_path / "fleet",
        {"spark": spark},
        {
            "lane": demo_recipe(["spark"], free_port(), f', "--signature", "{LOADING}"'),
            "slow": demo_recipe(["spark"], free_port(), ', "--boot-delay", "60"', ready_s=120),
            # its two stages 1 s apart (0.3 s in "lane"): a 0.2 s poll sees each even on a loaded machine
            "paced": demo_recipe(["spark"], free_port(), ', "--boot-delay", "3"'),
        },
    )
    inv = inventory.load(root)
    yield inv, root
    for lane in ("lane", "slow", "paced"):
        lanes.stop(inv, lane, 5)


def test_progress_per_rank_with_weight_load_and_last_line(fleet):
    inv, _ = fleet
    snaps = []
    report = lanes.launch(inv, "lane", on_progress=snaps.append, allow_nas_weights=True)
    assert report.ready.ok
    head = [s[0] for s in snaps]
    assert all(s.rank == 0 and s.host == "spark" and s.stages_total == 2 for s in head)
    seen = [s.stages_seen for s in head]
    assert seen == sorted(seen) and seen[-1] == 2  # stages only move forward, all reached
    assert head[-1].stage == "The server is fired up and ready to roll!"
    assert any(s.load_progress == "1/2 (50%)" for s in head)
    assert head[-1].elapsed_s >= head[0].elapsed_s and head[-1].last_line


def _spawn(root, *args):
    return subprocess.Popen(
        [sys.executable, "-m", "sparkfleet", "--root", str(root), "launch", "--allow-nas-weights", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_non_tty_prints_one_line_per_stage_change(fleet):
    _, root = fleet
    proc = _spawn(root, "paced")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    lines = [ln for ln in err.splitlines() if ln.startswith("· rank 0 on spark:")]
    assert [ln.split(" (")[0] for ln in lines] == [
        "· rank 0 on spark: RoCEnante ready: world=1",
        "· rank 0 on spark: The server is fired up and ready to roll!",
    ]
    assert "(1/2 stages, " in lines[0] and "(2/2 stages, " in lines[1]


def _interrupt_after_start(proc) -> str:
    err = []
    for line in proc.stderr:  # wait until the rank has started, then Ctrl-C (SIGINT by our own PID)
        err.append(line)
        if "started rank 0" in line:
            break
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    return "".join(err) + rest


@pytest.mark.parametrize("stop_on_interrupt", [False, True])
def test_ctrl_c_names_running_ranks_or_stops_them(fleet, stop_on_interrupt):
    inv, root = fleet
    proc = _spawn(root, "slow", *(["--stop-on-interrupt"] if stop_on_interrupt else []))
    err = _interrupt_after_start(proc)
    assert proc.returncode == ExitCode.INTERRUPTED, err
    running = lanes.status(inv, "slow").ranks
    if stop_on_interrupt:
        assert "slow stopped (--stop-on-interrupt)" in err
        assert not any(r.running for r in running)
    else:
        pid = running[0].pid
        assert running[0].running
        assert f"ranks still running: rank 0 on spark (pid {pid})" in err
        assert "hint: sparkfleet stop slow" in err


def test_terminal_table_shows_each_rank():
    from rich.console import Console

    from sparkfleet.cli.progress import boot_table
    from sparkfleet.lane.readiness import RankProgress

    ranks = [
        RankProgress("dgx1", 0, "RoCEnante ready: world=4", 1, 4, 612.0, "10/22 (45%)", "loading shard 10"),
        RankProgress("dgx2", 1, None, 0, 4, 612.0, None, "Traceback: boom", running=False),
    ]
    console = Console(record=True, width=160)
    console.print(boot_table(ranks))
    text = console.export_text()
    assert "1/4 RoCEnante ready: world=4" in text and "10/22 (45%)" in text and "612 s" in text
    assert "EXITED 0/4" in text and "Traceback: boom" in text


def test_a_long_last_log_line_is_cut_from_the_right():
    """The table showed "o openai_server: listening…": the start of a line says what it is."""
    from rich.console import Console

    from sparkfleet.cli.progress import boot_table
    from sparkfleet.lane.readiness import RankProgress

    line = "sparkfleet demo openai_server: listening on http://127.0.0.1:40001 (model dsv41-flash) " * 2
    ranks = [RankProgress("dgx1", 0, None, 0, 4, 1.0, None, line)]
    console = Console(record=True, width=240)
    console.print(boot_table(ranks))
    text = console.export_text()
    assert "sparkfleet demo openai_server: listening on http://127.0.0.1:40001" in text
    assert line[-30:].strip() not in text and "…" in text


def test_an_80_column_terminal_keeps_every_column_but_the_log_line_whole():
    """At 80 columns the table dropped "stage", squeezed "weights" to an ellipsis, and a stage in
    brackets ("[moe_b12x_next] armed") vanished as rich markup."""
    from rich.console import Console

    from sparkfleet.cli.progress import boot_table
    from sparkfleet.lane.readiness import RankProgress

    long_line = "[2026-12-04 21:00:01] RoCEnante ready: world=2 (rank 0) waiting for the scheduler to warm up"
    ranks = [
        RankProgress("dgx1", 0, "[moe_b12x_next] armed", 2, 3, 1.8, "10/22 (45%)", long_line),
        RankProgress("dgx2", 1, "RoCEnante ready: world=2", 1, 3, 1.7, None, "Load weight end."),
    ]
    console = Console(record=True, width=80)
    console.print(boot_table(ranks))
    text = console.export_text()
    assert all(len(line) <= 80 for line in text.splitlines())
    for cell in ("rank", "host", "stage", "elapsed", "weights", "2/3 [moe_b12x_next] armed",
                 "1/3 RoCEnante ready: world=2", "10/22 (45%)", "2 s"):  # fmt: skip
        assert cell in text, cell
    assert "[2026-" in text  # the log line keeps its start, cut at the end
