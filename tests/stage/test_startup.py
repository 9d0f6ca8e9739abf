"""Start-up: a stage run imports what staging needs, not the inventory's schema validator or rich.

Why: a rerun of an up-to-date tree is mostly start-up (importing the stage verb with all it can
reach costs 0.34-0.37 s of a 0.46-0.53 s rerun; jsonschema alone 130 ms, even in direct mode, which reads
no inventory; rich 35 ms). Each probe runs in a fresh interpreter and reports its sys.modules.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sparkfleet.demo.hubfixture import WEIGHTS_REPO, HubFixture

HEAVY = ("jsonschema", "rich")

# Runs the CLI in this interpreter (as `python -m sparkfleet` does), then writes which of HEAVY
# were imported to the file named by the first argument.
PROBE = """
import json, sys
HEAVY = {heavy!r}
report, argv = sys.argv[1], sys.argv[2:]
code = 0
try:
    if argv:
        from sparkfleet.cli import main
        main(argv, prog_name="sparkfleet")
    else:
        import sparkfleet.cli.stage
except SystemExit as exc:
    code = exc.code
heavy = sorted({name.split(".")[0] for name in sys.modules} & set(HEAVY))
unneeded = ("sparkfleet.fleet.inventory", "sparkfleet.launch", "sparkfleet.roofline.machine", "secrets")
fleet = sorted(m for m in sys.modules if m.startswith(unneeded))
with open(report, "w") as f:
    json.dump({"code": code, "heavy": heavy, "fleet_modules": fleet}, f)
""".replace("{heavy!r}", repr(HEAVY))


def probe(tmp_path: Path, *argv: str) -> dict:
    report = tmp_path / "probe.json"
    env = {k: v for k, v in os.environ.items() if k != "SPARKFLEET_ROOT"}
    subprocess.run(
        [sys.executable, "-c", PROBE, str(report), *argv],
        check=True,
        capture_output=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    return json.loads(report.read_text())


def test_importing_the_stage_verb_pulls_neither_jsonschema_nor_rich(tmp_path: Path):
    assert probe(tmp_path)["heavy"] == []


def test_stage_help_pulls_neither_jsonschema_nor_rich(tmp_path: Path):
    result = probe(tmp_path, "stage", "--help")
    assert (result["code"], result["heavy"]) == (0, [])


def test_a_direct_mode_rerun_of_a_complete_tree_pulls_neither(tmp_path: Path, nas: HubFixture, local: Path):
    args = ("stage", "--source", str(nas.root), "--dest", str(local), "--repo", f"{WEIGHTS_REPO}@main")
    assert probe(tmp_path, *args, "--json")["code"] == 0  # the first run copies
    result = probe(tmp_path, *args, "--json")
    # nor the inventory, the launch spec, the roofline's probes (nothing copied, nothing to bound), secrets
    assert result == {"code": 0, "heavy": [], "fleet_modules": []}
