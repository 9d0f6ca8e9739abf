"""`stage` brings a lane's pinned kit checkout to <state_dir>/kits/<pin>/<rev>/.

The pure parts (which checkouts a host's lanes bind, where a pin is cloned from, the hint) and the
host side (stage/kits.py) on this machine, with a real git repository as the pin's url: a fresh
fetch, a rerun that leaves it alone, a dirty or wrong checkout replaced (the old one kept whole), a
rev the repository lacks or a commit without the trees' files refused with nothing left behind,
a killed run's temp clone swept, and a second run on the same host refused by the lock.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from sparkfleet.base.atomic import temp_name
from sparkfleet.base.errors import ExitCode, InventoryError, LockBusyError, SparkfleetError
from sparkfleet.base.lock import hub_lock
from sparkfleet.demo.hubfixture import build_nas_hub
from sparkfleet.fleet import inventory
from sparkfleet.fleet.kittrees import kit_checkouts
from sparkfleet.ops.doctor import doctor
from sparkfleet.stage.kits import plan_kits, stage_kits, verify_kits
from sparkfleet.stage.targets import kits_for_host
from support.kitrepo import FILES, SERVING, KitRepo, git, make_kit_repo, trees_toml
from support.lanefleet import lane_recipe, repo_fleet, write_fleet
from support.stagefleet import STAGE_MODELS, STAGE_PINS

REPO_ID = "example/kit"
DEFAULTS = {"ssh_user": "root", "reserve_gib": 0}


def _fleet(
    tmp_path: Path, kit: KitRepo, rev: str | None = None, url: str | None = "repo", sha=None, address="dgx1"
):
    pin = {"kind": "git", "repo": REPO_ID, "rev": rev or kit.rev}
    if url:
        pin["url"] = str(kit.path) if url == "repo" else url
    hosts = {"dgx1": {"address": address, "local_hub": tmp_path / "hub", "nas_hub": tmp_path / "nas",
                      "state_dir": tmp_path / "state"}}  # fmt: skip
    recipe = lane_recipe(["dgx1"], STAGE_MODELS, trees_toml("kit", sha))
    pins = {**STAGE_PINS, "kit": pin}
    root = write_fleet(tmp_path / "fleet", hosts, {"lane": recipe}, defaults=DEFAULTS, pins=pins)
    return inventory.load(root)


@pytest.fixture
def kit(tmp_path) -> KitRepo:
    return make_kit_repo(tmp_path / "kit-repo")


def _stage(inv, **kw):
    co = kits_for_host(inv, "dgx1")
    return stage_kits(co, inventory.state_dir_of(inv.host("dgx1")), "dgx1", **kw)


def _head(path: Path) -> str:
    return git(path, "rev-parse", "HEAD")


def test_the_pin_is_cloned_from_its_url_else_github(tmp_path, kit):
    inv = _fleet(tmp_path, kit)
    (co,) = kits_for_host(inv, "dgx1")
    assert (co.pin, co.rev, co.url) == ("kit", kit.rev, str(kit.path))
    assert co.path(tmp_path / "state") == tmp_path / "state" / "kits" / "kit" / kit.rev
    assert co.trees[0].needs == ("serve.py", "conservative.yaml")
    real = inventory.load(repo_fleet(tmp_path / "real"))
    (exl3,) = kit_checkouts([real.lane("dsv41-flash-exl3-2x")], real)
    assert exl3.url == "https://github.com/coolbho3k/DeepSeek-v4.1-Flash-2x-DGX-Spark"
    assert len(exl3.trees) == 2  # both trees of the one pin: one checkout
    assert kits_for_host(real, "dgx3", "dsv41-flash-4x-mia") == []  # no [[launch.trees]]
    hint = exl3.trees[0].fix("/var/lib/sparkfleet", "dgx2", "dsv41-flash-exl3-2x")
    assert hint.startswith("sparkfleet stage dgx2 --lane dsv41-flash-exl3-2x (clones ")
    assert "git clone" not in hint


def test_a_replica_copys_host_holds_the_kit_too(tmp_path, kit):
    pin = {"kind": "git", "repo": REPO_ID, "rev": kit.rev, "url": str(kit.path)}
    hosts = {
        h: {"address": h, "local_hub": tmp_path / h, "nas_hub": tmp_path / "nas"}
        for h in ("dgx1", "dgx2", "dgx3")
    }
    recipe = (
        lane_recipe(["dgx1"], STAGE_MODELS, trees_toml("kit"))
        + '\n[gateway]\nreplicas = [["dgx1"], ["dgx2"]]\n'
    )
    pins = {**STAGE_PINS, "kit": pin}
    inv = inventory.load(write_fleet(tmp_path / "f", hosts, {"lane": recipe}, defaults=DEFAULTS, pins=pins))
    for lane in (None, "lane"):  # as the staging unit runs it, and by name
        (co,) = kits_for_host(inv, "dgx2", lane)
        assert (co.pin, co.rev, co.url) == ("kit", kit.rev, str(kit.path))
    assert kits_for_host(inv, "dgx3") == []
    with pytest.raises(InventoryError, match="host dgx3 is not in lane lane"):
        kits_for_host(inv, "dgx3", "lane")


def test_a_url_that_would_reach_git_as_an_option_is_refused(tmp_path, kit):
    with pytest.raises(InventoryError, match=r"pins\.kit\.url"):
        _fleet(tmp_path, kit, url="--upload-pack=touch /tmp/x")


def test_fetch_then_a_rerun_leaves_it_alone(tmp_path, kit):
    inv = _fleet(tmp_path, kit, rev=kit.rev[:10])  # abbreviated, like mia-tp4's cad252b7d3
    final = tmp_path / "state" / "kits" / "kit" / kit.rev[:10]
    (dry,) = plan_kits(kits_for_host(inv, "dgx1"), tmp_path / "state")
    assert (dry.state, dry.path) == ("fetch", str(final)) and not final.exists()
    (done,) = _stage(inv)
    assert (done.state, done.head) == ("fetched", kit.rev)
    assert _head(final) == kit.rev and git(final, "status", "--porcelain") == ""
    for rel, data in FILES.items():
        assert (final / rel).read_bytes() == data
    inode = final.stat().st_ino
    (again,) = _stage(inv)
    assert (again.state, again.head) == ("present", kit.rev) and final.stat().st_ino == inode
    assert [p.name for p in final.parent.iterdir()] == [final.name]  # no temp, nothing aside


def test_a_dirty_or_wrong_checkout_is_replaced_never_changed_in_place(tmp_path, kit):
    inv = _fleet(tmp_path, kit)
    final = tmp_path / "state" / "kits" / "kit" / kit.rev
    _stage(inv)
    (final / SERVING / "serve.py").write_text("# edited on the host\n")
    old_inode = final.stat().st_ino
    (dry,) = plan_kits(kits_for_host(inv, "dgx1"), tmp_path / "state")
    assert dry.state == "replace" and "changed in place" in dry.why
    (done,) = _stage(inv)
    assert done.state == "replaced" and "changed in place" in done.why
    assert (final / SERVING / "serve.py").read_bytes() == FILES[f"{SERVING}/serve.py"]
    kept = Path(done.kept)
    assert kept.stat().st_ino == old_inode  # moved aside whole: a running lane's bind still sees it
    assert (kept / SERVING / "serve.py").read_text() == "# edited on the host\n"
    git(final, "checkout", "--quiet", "--detach", kit.later)  # the right name, the wrong commit
    (done,) = _stage(inv)
    assert done.state == "replaced" and f"at {kit.later[:12]}, not {kit.rev}" in done.why
    assert _head(final) == kit.rev


@pytest.mark.parametrize("case", ["no such rev", "rev lacks the files", "unreachable url"])
def test_a_bad_pin_is_refused_naming_it_and_nothing_is_left(tmp_path, kit, case):
    rev = {"no such rev": "0123456789abcdef", "rev lacks the files": kit.later}.get(case, kit.rev)
    url = str(tmp_path / "no-such-repo") if case == "unreachable url" else "repo"
    inv = _fleet(tmp_path, kit, rev=rev, url=url)
    with pytest.raises(SparkfleetError) as exc:
        _stage(inv)
    message = exc.value.message
    assert message.startswith(f"dgx1: kit pin kit ({REPO_ID}@{rev}) from ")
    assert (str(kit.path) if url == "repo" else url) in message
    want = {"no such rev": ExitCode.REFUSED, "rev lacks the files": ExitCode.REFUSED}
    assert exc.value.exit_code == want.get(case, ExitCode.UNREACHABLE)
    if case == "rev lacks the files":
        assert f"{SERVING}/serve.py" in message
    kits = tmp_path / "state" / "kits"
    assert [p.name for p in kits.iterdir()] == [".locks"]  # no checkout, no temp, no pin folder


def test_a_killed_runs_temp_clone_is_swept_and_a_second_run_waits_its_turn(tmp_path, kit):
    inv = _fleet(tmp_path, kit)
    final = tmp_path / "state" / "kits" / "kit" / kit.rev
    leftover = temp_name(final)
    leftover.mkdir(parents=True)
    (leftover / "half-written").write_text("x")
    (done,) = _stage(inv)
    assert done.state == "fetched" and not leftover.exists()
    with hub_lock(tmp_path / "state" / "kits"), pytest.raises(LockBusyError):
        _stage(inv)


def test_a_stage_killed_mid_clone_converges_on_rerun(tmp_path, kit):
    """kill -9 of a real `sparkfleet stage` while git is cloning: no final name; the rerun fetches."""
    inv = _fleet(tmp_path, kit)
    build_nas_hub(tmp_path / "nas", shard_bytes=64 * 1024)
    final = tmp_path / "state" / "kits" / "kit" / kit.rev
    hook = tmp_path / "slow-git"
    hook.write_text(f'#!/bin/sh\n{_real_git()} "$@" || exit $?\nif [ "$1" = clone ]; then sleep 30; fi\n')
    hook.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(hook)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SPARKFLEET_HOST": "dgx1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparkfleet", "--root", str(inv.root), "stage", "dgx1", "--json"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:  # the clone is there, whole, in its temp: the run dies before it is named
        _wait_for(lambda: any((p / ".git").is_dir() for p in final.parent.glob(f".{kit.rev}*")))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the stage and its git, by their process group
        proc.wait()
    assert len(list(final.parent.glob(f".{kit.rev}*"))) == 1
    assert not final.exists()
    out = subprocess.run(
        [sys.executable, "-m", "sparkfleet", "--root", str(inv.root), "stage", "dgx1", "--json"],
        env={**os.environ, "SPARKFLEET_HOST": "dgx1"}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    (record,) = json.loads(out.stdout)["kits"]
    assert record["state"] == "fetched" and _head(final) == kit.rev
    assert [p.name for p in final.parent.iterdir()] == [final.name]


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPARKFLEET_HOST": "dgx1"}  # dgx1 is this machine: staged here
    cmd = [sys.executable, "-m", "sparkfleet", "--root", str(root), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)


def _launch_refusal(inv) -> str | None:
    """launch's [[launch.trees]] check on dgx1 (the agent's own probe, on this filesystem)."""
    from sparkfleet.lane.recipe import launch_recipe
    from sparkfleet.launch.plan import check_kits, node_facts, probe_request
    from sparkfleet.node.agent import probe

    recipe = launch_recipe(inv, "lane")
    req = dataclasses.replace(probe_request(inv, recipe, inv.host("dgx1")), models=[], ports=[], memory=False)
    try:
        check_kits(recipe, node_facts("dgx1", probe(req)))
    except SparkfleetError as exc:
        return f"{exc.message}\n{exc.hint}"
    return None


def test_stage_names_the_checkout_and_launch_no_longer_refuses(tmp_path, kit):
    inv = _fleet(tmp_path, kit, sha=kit.serve_sha256)
    build_nas_hub(tmp_path / "nas", shard_bytes=64 * 1024)
    final = tmp_path / "state" / "kits" / "kit" / kit.rev
    refusal = _launch_refusal(inv)
    assert refusal is not None and "sparkfleet stage dgx1 --lane lane" in refusal
    line = f"kit kit {REPO_ID}@{kit.rev[:10]} at {final}: "
    dry = _cli(inv.root, "stage", "dgx1", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"{line}would fetch from {kit.path}" in dry.stdout and not final.exists()
    dry = _cli(inv.root, "stage", "dgx1", "--lane", "lane", "--dry-run", "--json")
    (planned,) = json.loads(dry.stdout)["kits"]
    assert (planned["state"], planned["path"], planned["url"]) == ("fetch", str(final), str(kit.path))
    run = _cli(inv.root, "stage", "dgx1", "--lane", "lane")
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{line}fetched from {kit.path}" in run.stdout
    assert _head(final) == kit.rev and _launch_refusal(inv) is None  # launch's refusal is gone
    run = _cli(inv.root, "stage", "dgx1")
    assert f"{line}present, left alone" in run.stdout


def test_verify_names_a_wrong_commit_and_a_wrong_sha256_and_changes_nothing(tmp_path, kit):
    inv = _fleet(tmp_path, kit, sha=kit.serve_sha256)
    state, final = tmp_path / "state", tmp_path / "state" / "kits" / "kit" / kit.rev
    (co,) = kits_for_host(inv, "dgx1")
    assert co.lanes == ("lane",)
    (v,) = verify_kits([co], state, "dgx1")
    assert (v.ok, v.why, v.path) == (False, "absent", str(final)) and not (state / "kits").exists()
    fix = f"sparkfleet stage dgx1 --lane lane (clones {kit.path} at {kit.rev} into {final} on dgx1)"
    assert v.fix == fix  # without --lane: the lane that binds it
    _stage(inv)
    (v,) = verify_kits([co], state, "dgx1", "lane")
    assert (v.ok, v.why, v.fix) == (True, "", "")
    other = replace(co, trees=(replace(co.trees[0], sha256={"serve.py": "0" * 64}),))
    (v,) = verify_kits([other], state, "dgx1", "lane")
    pinned = f"(sha256 {kit.serve_sha256[:12]}…, the kit pins 000000000000…)"
    want = f"lacks {final / SERVING / 'serve.py'} {pinned}"
    assert (v.ok, v.why, v.fix) == (False, want, fix)
    git(final, "checkout", "--quiet", "--detach", kit.later)
    (v,) = verify_kits([co], state, "dgx1", "lane")
    assert (v.ok, v.why) == (False, f"at {kit.later[:12]}, not {kit.rev}")
    assert _head(final) == kit.later and sorted(p.name for p in final.parent.iterdir()) == [final.name]


def test_verify_after_stage_reports_the_kit_and_exits_1_when_it_is_changed_or_gone(tmp_path, kit):
    """The user's order: `stage`, then `verify` before `launch`. A verify that reads only the
    models passes a checkout edited on the host or removed with exit 0."""
    inv = _fleet(tmp_path, kit, sha=kit.serve_sha256)
    build_nas_hub(tmp_path / "nas", shard_bytes=64 * 1024)
    final = tmp_path / "state" / "kits" / "kit" / kit.rev
    staged = _cli(inv.root, "stage", "dgx1")
    assert staged.returncode == 0, staged.stdout + staged.stderr
    line = f"kit kit {REPO_ID}@{kit.rev[:10]} at {final}"
    good = _cli(inv.root, "verify", "dgx1")
    assert good.returncode == 0, good.stdout + good.stderr
    assert f"✓ {line}: at the pinned rev, clean, complete" in good.stdout
    assert good.stdout.rstrip().endswith(", missing: 0, kits ok: 1/1")

    served = final / SERVING / "serve.py"
    served.write_text("# edited on the host\n")
    fix = f"fix: sparkfleet stage dgx1 --lane lane (clones {kit.path} at {kit.rev} into {final} on dgx1)"
    bad = _cli(inv.root, "verify", "dgx1", "--lane", "lane")
    assert bad.returncode == ExitCode.SHORTFALL, bad.stdout + bad.stderr
    assert f"✗ {line}: changed in place (1 paths, e.g. M {SERVING}/serve.py)\n  {fix}\n" in bad.stdout
    assert "kits ok: 0/1" in bad.stdout
    fleet = _cli(inv.root, "verify", "--lane", "lane")  # the lane-wide form: each host answers
    assert fleet.returncode == ExitCode.SHORTFALL, fleet.stdout + fleet.stderr
    assert f"dgx1: ✗ {line}: changed in place" in fleet.stdout and f"dgx1:   {fix}" in fleet.stdout
    assert served.read_text() == "# edited on the host\n"  # verify changed nothing
    assert sorted(p.name for p in final.parent.iterdir()) == [final.name]

    shutil.rmtree(final)
    gone = _cli(inv.root, "verify", "dgx1", "--json")
    assert gone.returncode == ExitCode.SHORTFALL, gone.stdout + gone.stderr
    doc = json.loads(gone.stdout)
    assert (doc["ok"], doc["missing"], doc["mismatches"]) == (False, 0, 0)  # the models are whole
    (k,) = doc["kits"]
    assert (k["ok"], k["why"], k["path"], k["rev"]) == (False, "absent", str(final), kit.rev)
    assert k["fix"] == fix.removeprefix("fix: ") and not final.exists()


def _real_git() -> str:
    return shutil.which("git") or "/usr/bin/git"


def _wait_for(cond, timeout: float = 20.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _kit_checks(inv) -> list:
    """doctor's kit lines for dgx1 (this machine: the agent runs here, on this filesystem)."""
    return [c for c in doctor(inv, "dgx1").checks if c.name.startswith("kit")]


def test_doctor_judges_the_checkout_as_verify_does_head_clean_complete(tmp_path, kit):
    """Before: doctor's kit check only asked whether the trees' files were there, so a checkout
    whose serve.py was edited on the host, or one at another commit holding the same files, was ✓
    while `verify` said ✗. Now doctor asks the node the same question (checkout_problem)."""
    inv = _fleet(tmp_path, kit, address="localhost")
    final = tmp_path / "state" / "kits" / "kit" / kit.rev
    fix = f"sparkfleet stage dgx1 --lane lane (clones {kit.path} at {kit.rev} into {final} on dgx1)"
    line = f"kit kit {REPO_ID}@{kit.rev[:10]} at {final}: "  # verify's words (pin kit)
    (absent,) = _kit_checks(inv)
    assert (absent.ok, absent.detail, absent.hint) == (False, f"{line}absent", fix)
    assert absent.refuses  # launch refuses it too (the trees' files are not there)
    _stage(inv)
    (good,) = _kit_checks(inv)
    assert (good.ok, good.detail, good.hint) == (True, f"{line}at the pinned rev, clean, complete", None)

    (final / SERVING / "serve.py").write_text("# edited on the host\n")
    (dirty,) = _kit_checks(inv)
    assert (dirty.ok, dirty.hint) == (False, fix), dirty
    assert dirty.detail == f"{line}changed in place (1 paths, e.g. M {SERVING}/serve.py)"
    assert dirty.refuses  # launch refuses it as the kit's preflight does: other code than the kit's
    out = _cli(inv.root, "doctor", "dgx1", "--json")
    assert out.returncode == ExitCode.REFUSED, out.stdout + out.stderr
    (shown,) = [c for c in json.loads(out.stdout)["checks"] if c["name"].startswith("kit")]
    assert (shown["ok"], shown["detail"], shown["hint"]) == (False, dirty.detail, fix)
    text = _cli(inv.root, "doctor", "dgx1")
    assert f"changed in place (1 paths, e.g. M {SERVING}/serve.py)" in text.stdout
    assert f"fix: {fix}" in text.stdout

    git(final, "checkout", "--quiet", "--", ".")
    git(final, "checkout", "--quiet", "--detach", kit.later)  # serve.py gone with the later commit
    (wrong,) = _kit_checks(inv)
    assert (wrong.ok, wrong.detail, wrong.hint) == (False, f"{line}at {kit.later[:12]}, not {kit.rev}", fix)
    git(final, "checkout", "--quiet", "--detach", kit.rev)
    (serving := final / SERVING / "conservative.yaml").unlink()
    git(final, "update-index", "--assume-unchanged", f"{SERVING}/conservative.yaml")  # clean, yet lacking
    (lacking,) = _kit_checks(inv)
    assert (lacking.ok, lacking.detail) == (False, f"{line}lacks {serving}")
    assert _head(final) == kit.rev and sorted(p.name for p in final.parent.iterdir()) == [final.name]
