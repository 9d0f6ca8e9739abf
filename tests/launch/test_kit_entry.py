"""Each lane renders what its kit's own launcher runs (issue 19, item 1), as far as it is recorded.

CI has no network, so the kits' files cannot be read here: each recipe's [kit] table records the
facts read from the kit at its commit, with the file each comes from, and these tests check that
sparkfleet's rendering of every rank follows them — the Aiden lane's full per-rank argv
(launch-sgl-dsv41.sh run_cmd()), and the env/knobs the EXL3 and TP4 kits set.
"""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest

from sparkfleet import inventory
from sparkfleet.launch.plan import dry_run

ROOT = Path(__file__).resolve().parents[2]
STAND_IN_DIGEST = "sha256:" + "5e" * 32  # the production tag's digest is not published in the kit


def _fleet(tmp_path: Path) -> inventory.Inventory:
    root = tmp_path / "fleet"
    (root / "hosts").mkdir(parents=True)
    text = (ROOT / "hosts" / "fleet.toml").read_text()
    text = text.replace('tag = "production-1.2"\n', f'tag = "production-1.2"\ndigest = "{STAND_IN_DIGEST}"\n')
    (root / "hosts" / "fleet.toml").write_text(text)
    shutil.copytree(ROOT / "recipes", root / "recipes")
    return inventory.load(root)


def _kit(lane: str) -> dict:
    return tomllib.loads((ROOT / "recipes" / lane / "recipe.toml").read_text())["kit"]


def _matches(kit_arg: str, ours: str, rank: int, head: str) -> bool:
    """A kit token with shell variables stands for what this fleet gives it."""
    if "$SNAP" in kit_arg:
        return ours == "<MODEL_PATH unknown>" or ours.startswith("/")  # the staged snapshot, bound
    want = kit_arg.replace("$r", str(rank)).replace("$HEAD", head)
    try:
        return float(want) == float(ours)  # the kit's "0.80" is sglang's 0.8
    except ValueError:
        return want == ours


def test_aiden_lane_renders_the_kits_argv_for_every_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    inv = _fleet(tmp_path)
    plan = dry_run(inv, "dsv41-flash-4x-aiden")
    kit = _kit("dsv41-flash-4x-aiden")
    head = inv.host("dgx1").fabric_ip
    assert [s.host for s in plan.by_rank()] == ["dgx1", "dgx2", "dgx3", "dgx4"]
    assert [s.host for s in plan.start_order()] == ["dgx4", "dgx3", "dgx2", "dgx1"]  # kit: ranks 3 2 1 0
    for spec in plan.by_rank():
        ours = list(spec.argv)
        assert len(ours) == len(kit["argv"]), (ours, kit["argv"])
        bad = [(k, o) for k, o in zip(kit["argv"], ours, strict=True) if not _matches(k, o, spec.rank, head)]
        assert not bad, f"rank {spec.rank}: {bad}"
        assert json.loads(ours[ours.index("--default-chat-template-kwargs") + 1]) == {"thinking": True}
        assert spec.image.endswith(STAND_IN_DIGEST) and "sparkrun-sglang-dsv41-gb10" in spec.image


@pytest.mark.parametrize("lane", ["dsv41-flash-4x-aiden", "dsv41-flash-4x-mia"])
def test_every_rank_gets_the_env_the_kit_sets(tmp_path, monkeypatch, lane):
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    plan = dry_run(_fleet(tmp_path), lane)
    kit = _kit(lane)
    expected = (
        kit.get("env")
        or tomllib.loads((ROOT / "recipes" / lane / "recipe.toml").read_text())["launch"]["env"]
    )
    for spec in plan.by_rank():
        wrong = {k: (v, spec.env.get(k)) for k, v in expected.items() if spec.env.get(k) != v}
        assert not wrong, f"{lane} rank {spec.rank}: kit vs ours {wrong}"


def test_exl3_lane_serves_with_the_kits_tested_profile(tmp_path, monkeypatch):
    """.env.ds41.example's tested knobs are what the rendered serve command carries."""
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    plan = dry_run(_fleet(tmp_path), "dsv41-flash-exl3-2x")
    env = _kit("dsv41-flash-exl3-2x")["env"]
    flags = {
        "--gpu-memory-utilization": "GPU_MEMORY_UTILIZATION",
        "--max-model-len": "MAX_MODEL_LEN",
        "--max-num-seqs": "MAX_NUM_SEQS",
        "--max-num-batched-tokens": "MAX_NUM_BATCHED_TOKENS",
    }
    for spec in plan.by_rank():
        argv = list(spec.argv)
        for flag, key in flags.items():
            assert float(argv[argv.index(flag) + 1]) == float(env[key]), (spec.rank, flag)
