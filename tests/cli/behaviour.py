"""What the command line says, written to a folder: two checkouts' folders compared with `diff -r`.

    python tests/cli/behaviour.py OUTDIR

A change meant to move code and not behaviour (a module moved, a helper folded into another) must
leave every verb's `--help` and every `--json` answer as it was. This writes, under OUTDIR:

- `help/<verb path>.txt`: every verb's `--help`, walked over the real click tree (lazy verbs
  included), and the usage line of each module the package runs as `python -m`;
- `run/<fleet>/<name>.txt`: stdout, stderr and exit code of a fixed set of commands that need no
  host, no network and change nothing outside a scratch folder, over the checkout's own fleet and a
  demo fleet written by the demo's own writer.

Scratch paths, this checkout's path, the interpreter's, clock times and the demo's free port are
replaced by fixed words, so two runs on one machine write the same bytes; a difference that is left
is a difference in behaviour (or a module path printed in a message, which a move changes).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from clitree import walk

import sparkfleet
from sparkfleet.demo.fleet import DEMO_LANE, write_demo_fleet

REPO = Path(__file__).resolve().parents[2]
DEMO_PORT = 18431  # the demo writer picks a free port; a fixed one keeps the answers comparable
# Clock readings, durations and this machine's free memory and disk: their keys in a JSON answer,
# and the same figures where a line of text prints them.
VOLATILE_KEYS = (
    "taken_at", "refresh_s", "answered_s", "free", "memory_available_bytes", "nvme_free_bytes",
)  # fmt: skip
VOLATILE_TEXT = (
    re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?"),  # an ISO time
    re.compile(r"(?<=MemAvailable )[\d.]+(?= GiB)"),
    re.compile(r"(?<=swap used )[\d.]+(?= GiB)"),
    re.compile(r"(?<=/dev/shm )[\d.]+(?= GiB)"),
    re.compile(r"[\d.]+(?= GiB free)"),
    re.compile(r"(?<=, free )[\d.]+ [KMGT]i?B(?=, reserve)"),  # stage's space line: this disk's free bytes
)
# Modules run as `python -m`, named by their last part so that a move does not lose them.
MODULE_ENTRIES = {
    "clidoc": [], "schemadoc": [], "metricsdoc": ["--no-such-flag"], "rank_parent": [],
    "watchdog": ["--help"], "gateway_main": [], "openai_server": ["--help"], "quality_deadline": [],
    "agent": ["no-such-action"],
}  # fmt: skip


def module_named(leaf: str) -> str:
    """The dotted name of the package's one module file called `leaf`.py, wherever it stands."""
    pkg = Path(sparkfleet.__file__).parent
    found = sorted(pkg.rglob(f"{leaf}.py"))
    if len(found) != 1:
        raise SystemExit(f"no single module named {leaf}: {found}")
    return ".".join(["sparkfleet", *found[0].relative_to(pkg).with_suffix("").parts])


class Normaliser:
    def __init__(self, scratch: Path) -> None:
        self.words = sorted(
            {
                str(scratch.resolve()): "<SCRATCH>",
                str(scratch): "<SCRATCH>",
                str(REPO): "<REPO>",
                sys.prefix: "<VENV>",
                sys.base_prefix: "<PYTHON>",
                os.path.realpath(sys.base_prefix): "<PYTHON>",
            }.items(),
            key=lambda kv: -len(kv[0]),  # the longest first: a scratch folder may sit inside another
        )

    def __call__(self, text: str) -> str:
        for path, word in self.words:
            text = text.replace(path, word)
        for pattern in VOLATILE_TEXT:
            text = pattern.sub("<N>", text)
        for key in VOLATILE_KEYS:
            text = re.sub(rf'("{key}": )(-?[\d.e+-]+|"[^"]*")', r'\1"<T>"', text)
        return text


def environment(scratch: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("SPARKFLEET_", "XDG_", "LC_", "LANG"))}
    return keep | {"HOME": str(scratch / "home"), "NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "100",
                   "LANG": "C.UTF-8", "TZ": "UTC", "PYTHONHASHSEED": "0"}  # fmt: skip


def run(argv: list[str], env: dict[str, str], cwd: Path, stdin: str = "") -> str:
    out = subprocess.run(argv, env=env, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=300)
    head = f"$ {' '.join(argv[1:])}\n--- exit {out.returncode}\n"
    return f"{head}--- stdout\n{out.stdout}--- stderr\n{out.stderr}"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def helps(out: Path, env: dict[str, str], norm: Normaliser) -> None:
    """Every verb's --help (in this process, as click renders it at 100 columns), and each module entry."""
    from click.testing import CliRunner

    from sparkfleet.cli import main

    runner = CliRunner(env={"COLUMNS": "100", "NO_COLOR": "1"})
    for path, _ in walk():
        result = runner.invoke(main, [*path, "--help"], prog_name="sparkfleet", terminal_width=100)
        name = "_".join(path) or "sparkfleet"
        write(out / "help" / f"{name}.txt", norm(f"exit {result.exit_code}\n{result.output}"))
    for leaf, args in MODULE_ENTRIES.items():
        text = run([sys.executable, "-m", module_named(leaf), *args], env, REPO)  # their pages name docs/
        write(out / "help" / f"python-m-{leaf}.txt", norm(text))
    helper = Path(sys.executable).parent / "sparkfleet-clear-receipts"
    write(out / "help" / "sparkfleet-clear-receipts.txt", norm(run([sys.executable, str(helper)], env, REPO)))


REPORT = {
    "schema": "sparkfleet.bench/1", "status": "ok", "failures": [], "tag": "t",
    "url": "http://127.0.0.1:1/v1", "recipe_sha256": "a" * 64,
    "settings": {"probe": {"prompt_tokens": 487, "max_tokens": 400}, "pp": [512], "tg": [128], "depths": [0],
                 "table_runs": 3, "sweep": {"levels": [1, 2], "requests_per_level": 16, "prompt_tokens": 256,
                 "max_tokens": 128}, "quality": None, "smoke": True},
    "fingerprints": {"dgx1": {"host": "dgx1", "kernel": "6.11.0-1016-nvidia", "driver": "580.95.05"}},
    "table": [{"test": "tg128", "depth": 0, "tps_mean": 35.0}],
    "sweep": [{"concurrency": 1, "aggregate_tps": 35.0}], "quality": None,
}  # fmt: skip


BASE, SLOWER, OTHER = "2026-09-27_090000_t", "2026-09-27_100000_t", "2026-09-27_110000_t"


def write_reports(reports: Path) -> None:
    """Three fixed bench reports: a baseline, one a little slower, one that measured another prompt."""
    reports.mkdir(parents=True, exist_ok=True)
    for stem, prompt, decode, ttft in (
        (BASE, 487, 35.0, 0.1),
        (SLOWER, 487, 31.5, 0.12),
        (OTHER, 128, 36.0, 0.37),
    ):
        doc = json.loads(json.dumps(REPORT))
        doc["created_utc"] = f"{stem[:10]}T{stem[11:13]}:{stem[13:15]}:{stem[15:17]}Z"
        doc["settings"]["probe"]["prompt_tokens"] = prompt
        doc["decode_probe"] = {"metrics": {"decode_tps": decode, "ttft_s": ttft}}
        (reports / f"{stem}.json").write_text(json.dumps(doc, indent=2) + "\n")


def checkout_commands(fleet: Path) -> dict[str, list[str]]:
    """The checkout's fleet: what reads the inventory and recipes alone (its hosts are not here)."""
    from sparkfleet.fleet import inventory

    inv = inventory.load(fleet)
    cmds = {
        "inventory-check": ["inventory", "check", "--json"],
        "inventory-show": ["inventory", "show", "--json"],
        "inventory-check-text": ["inventory", "check"],
    }
    for name in sorted(inv.lanes):
        lane = inv.lanes[name]
        cmds[f"launch-dry-run-{name}"] = ["launch", name, "--dry-run", "--json"]
        cmds[f"launch-dry-run-text-{name}"] = ["launch", name, "--dry-run"]
        cmds[f"report-list-{name}"] = ["report", "list", name, "--json"]
        cmds[f"history-{name}"] = ["history", name, "--json"]
        for host in lane.hosts[:2]:
            cmds[f"env-offline-{name}-{host}"] = ["env", name, host, "--offline", "--json"]
            cmds[f"manifest-offline-{name}-{host}"] = ["manifest", name, host, "--offline", "--json"]
    cmds["launch-no-such-lane"] = ["launch", "no-such-lane", "--dry-run", "--json"]
    cmds["env-no-such-host"] = ["env", sorted(inv.lanes)[0], "no-such-host", "--offline", "--json"]
    cmds["image-load-no-result"] = ["image", "load", sorted(inv.lanes)[0], "--dry-run", "--json"]
    return cmds


def demo_commands(scratch: Path) -> dict[str, list[str]]:
    """The demo fleet: its hosts are this machine, so the agent answers from the scratch folder."""
    lane, state = DEMO_LANE, str(scratch / "state")
    return {
        "inventory-check": ["inventory", "check", "--json"],
        "inventory-show": ["inventory", "show", "--json"],
        "launch-dry-run": ["launch", lane, "--dry-run", "--json"],
        "launch-dry-run-text": ["launch", lane, "--dry-run"],
        "env": ["env", lane, "dgx1", "--json"],
        "env-offline": ["env", lane, "dgx2", "--offline", "--json"],
        "manifest": ["manifest", lane, "dgx1", "--json"],
        "manifest-offline": ["manifest", lane, "dgx1", "--offline", "--json"],
        "stage-lane-dry-run": ["stage", "--lane", lane, "--dry-run", "--json"],
        "stage-host-dry-run": ["stage", "dgx1", "--dry-run", "--json"],
        "stage-host-dry-run-text": ["stage", "dgx2", "--dry-run"],
        "verify": ["verify", "dgx1", "--json"],
        "engram-verify": ["engram", "verify", lane, "dgx1", "--json"],
        "logs": ["logs", lane, "--json"],
        "bootstrap-dry-run": ["bootstrap", "dgx1", "--dry-run", "--json"],
        "image-load-process-runtime": ["image", "load", lane, "--dry-run", "--json"],
        "engram-pack-dry-run": ["engram", "pack", lane, "dgx1", "--dry-run", "--json"],
        "roofline": ["roofline", lane, "--json"],
        "roofline-text": ["roofline", lane],
        "history": ["history", lane, "--json"],
        "status": ["status", lane, "--json"],
        "report-list": ["report", "list", lane, "--json"],
        "report-list-text": ["report", "list", lane],
        "report-compare": ["report", "compare", BASE, SLOWER, "--lane", lane, "--json"],
        "report-compare-refused": ["report", "compare", BASE, OTHER, "--lane", lane, "--json"],
        "report-compare-forced-text": ["report", "compare", BASE, OTHER, "--lane", lane, "--force"],
        "keys-list": ["keys", "list", "--state-dir", state, "--json"],
        "gateway-status": ["gateway", "status", "--state-dir", state, "--json"],
        "pins-import-lock-missing": ["pins", "import-lock", "--from", str(scratch / "none.json"), "--dry-run",
                                     "--json"],
        "view-targets": ["view", "targets", "--out", str(scratch / "targets"), "--json"],
        "stop-nothing": ["stop", lane, "--json"],
        "view-snapshot": ["view", "snapshot", "--json"],
        "doctor": ["doctor", lane, "--json"],
        "power-status": ["power", "status", "--json"],
        "usage-error": ["launch", "--no-such-option", "--json"],
    }  # fmt: skip


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sf-behaviour-") as tmp:
        scratch = Path(tmp)
        (scratch / "home").mkdir()
        norm, env = Normaliser(scratch), environment(scratch)
        helps(out, env, norm)
        demo = write_demo_fleet(scratch / "demo", shard_bytes=16 * 1024)
        recipe = demo.root / "recipes" / DEMO_LANE / "recipe.toml"
        recipe.write_text(re.sub(r"(?m)^port = \d+$", f"port = {DEMO_PORT}", recipe.read_text()))
        write_reports(demo.root / "recipes" / DEMO_LANE / "reports")
        for fleet, cmds in (("checkout", checkout_commands(REPO)), ("demo", demo_commands(scratch))):
            root = REPO if fleet == "checkout" else demo.root
            for name, args in cmds.items():
                argv = [sys.executable, "-m", "sparkfleet", "--root", str(root), *args]
                write(out / "run" / fleet / f"{name}.txt", norm(run(argv, env, scratch)))
        agent = [sys.executable, "-m", "sparkfleet", "agent", "no-such-action"]
        write(out / "run" / "agent-unknown-action.txt", norm(run(agent, env, scratch, stdin="{}")))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.split("\n\n")[1])
    main(Path(sys.argv[1]))
