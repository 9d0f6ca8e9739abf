"""Issue 20.4: an incident bundle carries no secret value, whatever its key is called, in any file.

A real local lane (process runtime, the demo server) whose [launch.env] holds secrets under names
the old key pattern missed (HF_AUTH, OPENAI_APIKEY, PASSPHRASE, a DATABASE_URL with a password)
and whose server prints its token into its own log. The bundle `watch` collects must hold none of
those values in any file, be 0700/0600, and stay out of the fleet checkout's git.
"""

from __future__ import annotations

import json
import shutil
import stat
import subprocess

import pytest

from sparkfleet.demo.hubfixture import build_nas_hub
from sparkfleet.fleet import inventory
from sparkfleet.lane.spec import redact_env, secret_values
from sparkfleet.launch import lane as lanes
from sparkfleet.ops.supervisor import collect_incident
from support.lanefleet import demo_recipe, free_port, write_fleet

SECRETS = {
    "HF_TOKEN": "hf_incident_token_0123456789",
    "HF_AUTH": "hf_auth_value_abcdef",
    "OPENAI_APIKEY": "sk-openai-9876543210",
    "PASSPHRASE": "correct horse battery staple",
    "DATABASE_URL": "postgres://svc:Pa55w0rd-xyz@db.internal/fleet",
}
PLAIN = {"NCCL_DEBUG": "INFO", "SGLANG_LOG_LEVEL": "debug"}


# make test runs modules on xdist workers: the lanes this module launches on this machine share
# its ports (the rendezvous port 20000, the demo's serving ports), so every such module runs on
# one worker ("local_lanes"), one at a time
pytestmark = pytest.mark.xdist_group("local_lanes")

def test_secret_rule_by_key_and_by_value():
    env = {**SECRETS, **PLAIN, "SESSION_ID": "abc123def", "SHORT_KEY": "xy"}
    shown = redact_env(env)
    assert {k for k, v in shown.items() if v == "<redacted>"} == {*SECRETS, "SESSION_ID", "SHORT_KEY"}
    assert shown["NCCL_DEBUG"] == "INFO"
    values = secret_values(env)
    assert "Pa55w0rd-xyz" in values and SECRETS["DATABASE_URL"] in values  # the password alone too
    assert "xy" not in values and "INFO" not in values  # too short to hunt in free text; not secret


@pytest.fixture
def secret_lane(tmp_path):
    nas = build_nas_hub(tmp_path / "nas" / "hub", shard_bytes=16 * 1024)
    host = {"address": "localhost", "ssh_user": "root", "local_hub": str(tmp_path / "nvme" / "hub"),
            "nas_hub": str(nas.root), "state_dir": str(tmp_path / "state")}  # fmt: skip
    # the server prints its token and its DSN into its own log (as careless engines do)
    leak = f', "--signature", "auth {SECRETS["HF_TOKEN"]} dsn {SECRETS["DATABASE_URL"]}"'
    recipe = demo_recipe(["spark"], free_port(), extra_args=leak)
    recipe += "\n[launch.env]\n" + "".join(f'{k} = "{v}"\n' for k, v in {**SECRETS, **PLAIN}.items())
    root = write_fleet(tmp_path / "fleet", {"spark": host}, {"demo": recipe})
    inv = inventory.load(root)
    report = lanes.launch(inv, "demo", canary=False, allow_nas_weights=True)  # an unstaged host
    try:
        assert report.ready and report.ready.ok
        yield inv
    finally:
        lanes.stop(inv, "demo", 5)


def test_bundle_holds_no_secret_value_in_any_file(secret_lane):
    inv = secret_lane
    log = next((inv.root.parent / "state").rglob("*.log")).read_text()
    assert SECRETS["HF_TOKEN"] in log  # the leak is real: the rank log carries the token
    reason = f"generation probe failed: HTTP 401 for {SECRETS['OPENAI_APIKEY']}"
    bundle = collect_incident(inv, "demo", reason)
    files = [p for p in bundle.parent.rglob("*") if p.is_file()]
    assert len(files) > 5
    for f in files:
        text = f.read_bytes().decode(errors="replace")
        for key, value in SECRETS.items():
            assert value not in text, (f, key)
        assert "Pa55w0rd-xyz" not in text, f
    meta = json.loads((bundle / "spark.rank0.json").read_text())
    assert all(meta["env"][k] == "<redacted>" for k in SECRETS), meta["env"]
    assert meta["env"]["NCCL_DEBUG"] == "INFO"  # what is not secret stays readable
    assert "auth <redacted> dsn <redacted>" in (bundle / "spark.rank0.log").read_text()
    # modes: the incidents folder and each bundle 0700, every file 0600
    for d in (bundle.parent, bundle):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    for f in bundle.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_bundles_stay_out_of_the_fleet_checkout(secret_lane):
    inv = secret_lane
    git = ["git", "-C", str(inv.root), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    bad = inv.root / "recipes" / "demo" / "generations" / "20260101T000000000Z.json"
    bad.write_text("[1, 2]")  # the KeyError: 'status' at the first incident
    bundle = collect_incident(inv, "demo", "generation probe failed: test")
    summary = json.loads((bundle / "summary.json").read_text())
    assert summary["skipped_generations"] == [f"{bad}: a JSON list, not a generation object"]
    assert summary["generation"] is not None  # the launch's own record, still found
    subprocess.run([*git, "add", "-A"], check=True)
    tracked = subprocess.run([*git, "ls-files"], capture_output=True, text=True, check=True).stdout
    assert "recipes/demo/recipe.toml" in tracked
    assert "incidents" not in tracked and bundle.is_dir()
