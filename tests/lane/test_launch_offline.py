"""Plan without the fleet: `env`/`manifest --offline`, an unreachable host, `launch --dry-run`.

The fleet's addresses (dgx1..dgx4) do not resolve here, so the real OpenSSH client fails on
them as it does on a laptop with the fleet off. --offline and --dry-run must not even try:
`connect` is replaced by a tripwire in those tests.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from test_launch_spec import TP4, make_inv

from sparkfleet.base.errors import ExitCode
from sparkfleet.cli import main
from sparkfleet.remote import nodecall


@pytest.fixture
def root(tmp_path):
    make_inv(tmp_path)
    return tmp_path / "fleet"


@pytest.fixture
def no_ssh(monkeypatch):
    def tripwire(*a, **k):
        raise AssertionError("a host was contacted")

    monkeypatch.setattr(nodecall, "connect", tripwire)  # the one way a controller module reaches a node


def cli(root, *args):
    return CliRunner().invoke(main, ["--root", str(root), *args], catch_exceptions=False)


def test_env_offline_shows_everything_derivable_and_marks_the_rest(root, no_ssh):
    res = cli(root, "env", "lane", "dgx2", "--offline")
    assert res.exit_code == ExitCode.OK, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == "# lane rank 1/4 on dgx2 (docker)"
    for kv in ("DSV41_LAUNCHER=tp4", "TP_SIZE=4", "EP_SIZE=1", "NNODES=4", "NODE_RANK=1",
               "DIST_INIT_ADDR=10.0.0.1:20000", "SGLANG_HOST_IP=10.0.0.2", "NCCL_NET=IB",
               "NCCL_CUMEM_ENABLE=0", "HF_TOKEN=<redacted>"):  # fmt: skip
        assert kv in lines
    for key in ("NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        [line] = [ln for ln in lines if ln.startswith(f"# unknown {key}:")]
        assert "sysfs" in line and "offline: no host contacted" in line
        assert not any(ln.startswith(f"{key}=") for ln in lines)
    assert any(ln.startswith("# unknown MODEL_PATH: staged state on dgx2") for ln in lines)
    assert "hf_do_not_print" not in res.output

    doc = json.loads(cli(root, "env", "lane", "dgx2", "--offline", "--json").stdout)
    assert doc["env"]["NODE_RANK"] == "1" and "NCCL_IB_HCA" in doc["unknown"] and doc["offline"] is True


def test_unreachable_host_prints_what_is_derivable_and_exits_unreachable(root):
    res = cli(root, "env", "lane", "dgx3")  # real ssh to a name that does not resolve
    assert res.exit_code == ExitCode.UNREACHABLE
    assert "NODE_RANK=2" in res.stdout.splitlines() and "TP_SIZE=4" in res.stdout.splitlines()
    assert "# unknown NCCL_IB_GID_INDEX:" in res.stdout and "unreachable: dgx3: ssh failed" in res.stdout
    assert "error: dgx3: ssh failed" in res.stderr and "--offline" in res.stderr
    doc = json.loads(cli(root, "manifest", "lane", "dgx3", "--json").stdout)
    assert list(doc["unreachable"]) == ["dgx3"] and "model binds" in doc["unknown"]


def test_manifest_offline_names_both_candidate_sources(root, tmp_path, no_ssh):
    res = cli(root, "manifest", "lane", "dgx1", "--offline")
    assert res.exit_code == ExitCode.OK, res.output
    out = res.stdout
    assert "--exclude page15/*" in out
    assert f"local  {tmp_path}/dgx1/nvme/hub/models--demo-org--" in out
    assert f"nas    {tmp_path}/nas/hub/models--demo-org--" in out
    assert "# unknown model binds: staged state on dgx1" in out
    assert "/snapshots/main" not in out  # a ref is never a snapshot directory
    assert "<unresolved ref main: refs/main there names it>" in out  # dgx1's hub: not readable here


def test_launch_dry_run_per_rank_in_start_order(root, tmp_path, no_ssh):
    res = cli(root, "launch", "lane", "--dry-run")
    assert res.exit_code == ExitCode.OK, res.output
    out = res.stdout
    heads = [ln for ln in out.splitlines() if ln.startswith("[")]
    assert heads == [
        "[1] rank 3 (worker) on dgx4: sparkfleet-lane-r3 (docker)",
        "[2] rank 2 (worker) on dgx3: sparkfleet-lane-r2 (docker)",
        "[3] rank 1 (worker) on dgx2: sparkfleet-lane-r1 (docker)",
        "[4] rank 0 (head) on dgx1: sparkfleet-lane-r0 (docker)",
    ]
    assert "hf_do_not_print" not in out and "HF_TOKEN=<redacted>" in out
    doc = json.loads(cli(root, "launch", "lane", "--dry-run", "--json").stdout)
    r = doc["ranks"][3]
    assert (r["rank"], r["host"], r["start"]) == (0, "dgx1", 4)
    assert r["image"] == "ghcr.io/example/lane@sha256:" + "ab" * 32
    argv = r["argv"]
    assert argv[:5] == ["docker", "run", "-d", "--name", "sparkfleet-lane-r0"]
    assert argv[argv.index("--env-file") + 1] == str(tmp_path / "dgx1/state/lanes/lane/rank0.env")
    assert argv[argv.index(r["image"]) + 1 :][:3] == ["python3", "-m", "sglang.launch_server"]
    assert argv[argv.index("--node-rank") + 1] == "0" and argv[argv.index("--tp") + 1] == "4"
    assert argv[argv.index("--model-path") + 1] == "<MODEL_PATH unknown>"  # never a guess
    assert r["binds"] == [
        f"{tmp_path}/dgx1/state/cache/lane:/cache",
        f"{tmp_path}/dgx1/state/bootcache/lane/{'ab' * 8}-main-tp4ep1pad0n4:/bootcache",  # node-local
    ]
    assert r["devices"] == ["/dev/infiniband"]
    assert r["env"]["HF_TOKEN"] == "<redacted>" and r["env"]["DIST_INIT_ADDR"] == "10.0.0.1:20000"
    assert set(r["unknown"]) >= {"NCCL_IB_HCA", "MODEL_PATH", "model binds"}


def test_dry_run_refuses_a_bad_shape_like_launch(tmp_path, no_ssh):
    make_inv(tmp_path, TP4.replace("tp = 4", "tp = 3").replace('launcher = "tp4"', 'launcher = "tp3"'))
    res = CliRunner().invoke(main, ["--root", str(tmp_path / "fleet"), "launch", "lane", "--dry-run"])
    assert res.exit_code == ExitCode.USAGE and "not divisible" in res.stderr


def test_a_ref_resolves_through_refs_where_the_hub_is_readable(tmp_path):
    from sparkfleet.demo.hubfixture import build_nas_hub
    from sparkfleet.lane.manifest import snapshot_path

    nas = build_nas_hub(tmp_path / "nas" / "hub", shard_bytes=16 * 1024)
    repo = nas.weights.repo
    commit = (nas.root / f"models--{repo.replace('/', '--')}" / "refs" / "main").read_text()
    path = snapshot_path(repo, "main", nas.root)
    assert path.endswith(f"/snapshots/{commit}") and (tmp_path / path).is_dir()
    assert snapshot_path(repo, commit, tmp_path / "elsewhere").endswith(f"/snapshots/{commit}")
    assert "<unresolved ref main" in snapshot_path(repo, "main", tmp_path / "elsewhere")
