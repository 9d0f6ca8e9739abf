"""The launch half of `make demo`: the demo lane served by the process runtime, then stopped.

The demo fleet lives on one machine (its hosts are loopback, so LocalHost runs the agent), so each
rank serves on port + rank. The serve command is the demo OpenAI-compatible server printing the
TP4-style boot signatures; a stale receipt root (the night shift's FileExistsError) is planted
first so before_serve visibly clears it.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from ..base.errors import SparkfleetError
from ..base.http import free_port
from ..base.selfexec import module_argv
from ..fleet import inventory
from ..fleet.inventory import Inventory
from ..lane.recipe import launch_recipe
from ..launch.lane import launch, status, stop
from ..launch.plan import prepare

SIGNATURES = (
    "Load weight end. type=demo, elapsed=0.8 s",
    "RoCEnante ready: world=2",
    "[moe_b12x_next] armed",
)
READY_LINE = "The server is fired up and ready to roll!"


def free_port_pair() -> int:
    """A port p with p+1 also free right now (head and worker of the two-rank demo lane)."""
    for _ in range(50):
        port = free_port()
        if port < 65535:
            with socket.socket() as t:
                try:
                    t.bind(("127.0.0.1", port + 1))
                    return port
                except OSError:
                    continue
    raise OSError("no two adjacent free ports on 127.0.0.1")


def demo_launch_tables(port: int | None = None, boot_delay: float = 2.0, canary: bool | None = None) -> str:
    """`[world]` + `[launch]` TOML for the demo lane (two ranks on one machine, process runtime)."""
    port = port or free_port_pair()
    args = ["--host", "127.0.0.1", "--port", "{rank_port}",
            "--served-model-name", "{served_model_name}", "--boot-delay", str(boot_delay),
            "--api-key-env", "SPARKFLEET_API_KEY"]  # the lane's key: 401 without it  # fmt: skip
    for sig in SIGNATURES:
        args += ["--signature", sig]
    command = json.dumps(module_argv("sparkfleet.demo.openai_server", *args))
    return f"""
[world]
tp = 2
ep = 1

[launch]
runtime = "process"
port = {port}
fabric = "none"
served_model_name = "deepseek-v4.1-flash"
command = {command}
ready_signatures = {json.dumps([*SIGNATURES[1:], READY_LINE])}
receipt_roots = ["/cache/ds41-backend-attestation", "/cache/ds41-combined-ready", "/cache/ds41-display-kv"]

[launch.timeouts]
ready_s = 60
poll_s = 0.25
stop_s = 10

# The fabric canary (gloo on one machine) needs torch beside sparkfleet; `make demo` installs only
# the runtime dependencies, so the demo runs it only where torch is importable (`make test`'s venv).
[launch.canary]
enabled = {json.dumps(canary_runs_here() if canary is None else canary)}
python = {json.dumps(sys.executable)}
"""


def canary_runs_here() -> bool:
    """Whether this interpreter can run the fabric canary's ranks (torch importable)."""
    return importlib.util.find_spec("torch") is not None


def run_demo_launch(
    inv: Inventory,
    lane: str,
    echo: Callable[[str], None],
    while_up: Callable[[], bool] | None = None,
) -> bool:
    """Show the manifests, launch the lane, report readiness and status, run `while_up` (smoke, bench)
    while it serves, stop it. True if it came up and `while_up` succeeded."""
    recipe = launch_recipe(inv, lane)
    plan = prepare(inv, lane)
    for spec in plan.by_rank():
        m = plan.manifests[spec.host]
        env = spec.env
        echo(
            f"rank {spec.rank} on {spec.host}: NODE_RANK={env['NODE_RANK']} TP_SIZE={env['TP_SIZE']} "
            f"NNODES={env['NNODES']} DIST_INIT_ADDR={env['DIST_INIT_ADDR']}; "
            f"manifest {m.local} local + {m.nas} NAS; MODEL_PATH={spec.env['MODEL_PATH']}"
        )
    head_cache = Path(plan.specs[recipe.world.head].cache_dir)
    stale = head_cache / "ds41-backend-attestation" / "root"
    stale.mkdir(parents=True, exist_ok=True)
    (stale / "worker.json").write_text('{"from": "yesterday"}')
    echo(f"planted a stale receipt root: {stale.parent}")
    try:
        # Ctrl-C while it boots: launch stops the ranks itself and says so, so nothing below can
        # contradict it ("stopped" here, "ranks still running" there)
        report = launch(inv, lane, on_event=lambda msg: echo(f"  {msg}"), stop_on_interrupt=True)
        for r in report.started:
            if r.receipts_cleared:
                echo(f"  before_serve on {r.host} removed {', '.join(r.receipts_cleared)}")
        rd = report.ready
        if rd is None or not rd.ok:
            echo(f"lane {lane} NOT ready: {rd.reason if rd else 'no readiness'}")
            for line in (rd.tail if rd else [])[-10:]:
                echo(f"    {line}")
            return False
        echo(f"lane {lane} ready in {rd.time_to_ready_s:.1f} s (weight load {rd.weight_load_s} s)")
        for sig, t in rd.stages.items():
            echo(f"  {t:6.2f} s  {sig}")
        st = status(inv, lane)
        e = st.endpoints or {}
        echo(
            f"status: {st.running}/{st.expected} ranks running; /health={e.get('health')} "
            f"/v1/models={e.get('models')}"
        )
        return while_up() if while_up else True
    finally:
        results = stop(inv, lane, recipe.timeouts.stop_s, by="sparkfleet demo")
        stopped = [s for s in results if s.get("was_running", True)]
        if stopped:  # only what this stop ended (a launch interrupted by Ctrl-C stopped its own)
            said = ", ".join(f"{s['host']} rank {s.get('rank', '?')} {s['detail']}" for s in stopped)
            echo(f"stop: {said}")


def stop_previous_demo(workdir: Path) -> list[dict]:
    """Stop every lane the demo fleet in `workdir` still runs, before that workdir is rebuilt or
    removed: its records are the only way to find those servers (PID + start time), so deleting
    them first would leave servers holding their ports that nothing recorded can stop.

    Returns the stop results of the ranks that were running; raises (nothing removed) when one of
    them did not stop."""
    root = workdir / "fleet"
    if not (root / "hosts" / "fleet.toml").is_file():
        return []
    inv = inventory.load(root)
    stopped = []
    for name in sorted(inv.lanes):
        results = stop(inv, name, 10, by="sparkfleet demo (its rerun)")
        stopped += [{"lane": name, **r} for r in results if r.get("was_running", True)]
    left = [r for r in stopped if not r["stopped"]]
    if left:
        where = ", ".join(f"{r['lane']} rank {r.get('rank', '?')} on {r['host']}: {r['detail']}"
                          for r in left)  # fmt: skip
        raise SparkfleetError(
            f"the previous demo in {workdir} still runs ({where}); its records are kept",
            hint=f"sparkfleet --root {root} stop {left[0]['lane']}",
        )
    return stopped
