"""Each lane against its kit's OWN files: the expectation is derived from the kit.

SPARKFLEET_KIT_DIR names a directory holding the kits' checkouts as <dir>/<owner>/<repo> (at the
commit each recipe's [kit] table names). CI has no network, so there these tests skip and
test_kit_entry.py checks the rendering against the facts recorded in [kit] instead. Nothing of the
kits is committed here: the tests run the kits' own launchers in their dry-run modes (the Aiden
kit's production.sh --dry-run, with ssh, ip and the RoCE sysfs reads answered by stubs) or import
them (the EXL3 kit's portable_node.docker_command()), for this fleet's hosts, and compare what they
would run on each node with what sparkfleet renders.

They run as root, so nothing of a kit runs before it is known to be the kit: every file the
recipe's [kit.sources] names is read once from the checkout, checked against the sha256 recorded
there, and copied into the test's own directory, and only that copy is run or imported. A file that
differs fails the test before anything runs; a file the kit would run that [kit.sources] does not
name is simply not there. (A checkout without .git is judged by the same sha256s.)
"""

from __future__ import annotations

import hashlib
import importlib.util
import ipaddress
import json
import os
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

from sparkfleet.base.relnames import inside
from sparkfleet.fleet import inventory
from sparkfleet.lane.spec import KEY_GUARD_MOUNT
from sparkfleet.launch.plan import dry_run
from sparkfleet.node.runtimes import container_run_argv
from support.kitflags import kit_pairs, missing_flags, run_pairs
from support.lanefleet import repo_fleet

ROOT = Path(__file__).resolve().parents[2]
KIT_DIR = os.environ.get("SPARKFLEET_KIT_DIR", "")
AIDEN_KIT = "recipes/deepseek-v4.1-flash/sglang"
EXL3_RUNTIME = "release/runtime"

pytestmark = pytest.mark.skipif(
    not KIT_DIR,
    reason="SPARKFLEET_KIT_DIR is not set (a directory of <owner>/<repo> kit checkouts at the recipes' "
    "[kit] commits); CI has no network, so tests/lane/test_kit_entry.py checks the recorded facts",
)


def _recipe(lane: str) -> dict:
    return tomllib.loads((ROOT / "recipes" / lane / "recipe.toml").read_text())


def _kit_checkout(lane: str) -> Path:
    """The kit's checkout for `lane` under SPARKFLEET_KIT_DIR (skipped where there is none). Read as
    data only: what runs is _verified_kit's copy."""
    fleet = tomllib.loads((ROOT / "hosts" / "fleet.toml").read_text())
    repo = fleet["pins"][_recipe(lane)["kit"]["pin"]]["repo"]
    path = Path(KIT_DIR) / repo
    if not path.is_dir():
        pytest.skip(f"no checkout of {repo} under SPARKFLEET_KIT_DIR={KIT_DIR}")
    return path


def _verified_kit(lane: str, tmp_path: Path) -> Path:
    """The files [kit.sources] names, each read once from the kit's checkout, checked against the
    sha256 recorded there and written under `tmp_path`: the only kit files a test runs or imports.
    Any file missing, different, or a link out of the checkout fails the test before anything of
    the kit has run (its hash is shown only for a file inside the checkout)."""
    kit = _recipe(lane)["kit"]
    path, out, wrong = _kit_checkout(lane), tmp_path / "verified-kit", {}
    for name, want in kit["sources"].items():
        src = inside(path, name)
        data = src.read_bytes() if src is not None and src.is_file() else None
        got = hashlib.sha256(data).hexdigest() if data is not None else None
        if got != want:
            wrong[name] = got or ("not a file in the checkout" if src is not None else "leaves the checkout")
            continue
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    if wrong:
        pytest.fail(
            f"{path} is not {lane}'s kit at {kit['commit']} ([kit.sources] recorded vs the checkout: "
            f"{wrong}); nothing of it was run"
        )
    return out


def _same_argv(kit: list[str], ours: list[str]) -> bool:
    """Token for token; a number the kit spells "0.80" is the 0.8 sparkfleet writes (both parse alike)."""

    def same(a: str, b: str) -> bool:
        if a == b:
            return True
        try:
            return float(a) == float(b)
        except ValueError:
            return False

    return len(kit) == len(ours) and all(same(a, b) for a, b in zip(kit, ours, strict=True))


def _fleet(tmp_path: Path) -> inventory.Inventory:
    return inventory.load(repo_fleet(tmp_path / "fleet"))


@pytest.mark.parametrize("lane", ["dsv41-flash-exl3-2x", "dsv41-flash-4x-aiden"])
def test_recorded_sources_are_the_kits_files(lane, tmp_path):
    """Every file the recipe's facts come from has, in the checkout, the sha256 the recipe records."""
    kit = _verified_kit(lane, tmp_path)
    assert sorted(str(p.relative_to(kit)) for p in kit.rglob("*") if p.is_file()) == sorted(
        _recipe(lane)["kit"]["sources"]
    )


# ---- the Aiden kit: production.sh --dry-run -----------------------------------------------------

STUB_SSH = """#!/bin/bash
# ssh [-o X]... user@ip CMD: run CMD here as that node (its fabric IP in KIT_NODE_IP)
while [ "${1#-}" != "$1" ]; do shift 2; done
export KIT_NODE_IP="${1#*@}"; shift
[ "$*" = true ] && exit 0
exec bash -c "$*"
"""
STUB_IP = """#!/bin/bash
echo "2: fabric    inet $KIT_HEAD_IP/24 brd 10.100.32.255 scope global fabric"
"""
STUB_CAT = """#!/bin/bash
# the RoCE GID table: index 3 holds this node's fabric IPv4 as a RoCE v2 GID
case "$1" in
  /sys/class/infiniband/*/gids/3) ip=${KIT_NODE_IP:-$KIT_HEAD_IP}; IFS=. read -r a b c d <<< "$ip"
    printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x\\n' "$a" "$b" "$c" "$d";;
  /sys/class/infiniband/*/gids/[012]) echo fe80:0000:0000:0000:0000:0000:0000:0001;;
  /sys/class/infiniband/*/gid_attrs/types/*) echo "RoCE v2";;
  /sys/class/infiniband/*) exit 1;;
  *) exec /bin/cat "$@";;
esac
"""


def _aiden_fleet_env(inv: inventory.Inventory, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """fleet.env for this fleet: the kit's site file with the lane's hosts, in rank order."""
    lane = inv.lane("dsv41-flash-4x-aiden")
    nodes = [inv.host(h).fabric_ip for h in lane.hosts]
    net = ipaddress.ip_network(f"{nodes[0]}/24", strict=False)
    ckpt = inv.pins["dsv41-flash"]
    rows = _recipe("dsv41-flash-4x-aiden")["engram"]["rows"]
    head_rows = ",".join(
        f"{layer}:{0}:{int(n) * 1 // 4}" for layer, n in sorted(rows.items(), key=lambda x: int(x[0]))
    )
    values = {
        "NODES": "(" + " ".join(nodes) + ")",
        "USERS": "(u u u u)",
        "HOMES": "(/home/u /home/u /home/u /home/u)",
        "FABRIC_IFACE": "fabric",
        "RDMA_HCAS": "rocep1s0f1",
        "FABRIC_SUBNET": str(net),
        "MODEL_REPO": "/mnt/dsv41",
        "SNAP": f"snapshots/{ckpt.value}",
        "MODEL_HOST_RANK": "0",
        "MODEL_REPO_HOST": "/home/u/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4.1-Flash",
        "ENGRAM_ROWS_HOST": head_rows,
        "ENGRAM_LOCAL_DIR": "dsv41-engram-local",
    }
    env_file = tmp_path / "fleet.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return env_file, values


def _aiden_kit_commands(kit: Path, inv: inventory.Inventory, tmp_path: Path) -> dict[int, list[str]]:
    """rank -> the `docker run` argv the kit's production.sh --dry-run prints for it."""
    env_file, values = _aiden_fleet_env(inv, tmp_path)
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name, text in (("ssh", STUB_SSH), ("ip", STUB_IP), ("cat", STUB_CAT)):
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    env = {
        "PATH": f"{stubs}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "FLEET_ENV": str(env_file),
        "KIT_HEAD_IP": values["NODES"].strip("()").split()[0],
    }
    res = subprocess.run(
        ["bash", str(kit / AIDEN_KIT / "launch" / "production.sh"), "--dry-run"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    out: dict[int, list[str]] = {}
    for block in res.stdout.split("== rank ")[1:]:
        rank, _, command = block.partition("\n")
        _mkdir, _, run = command.strip().partition("; ")
        out[int(rank)] = shlex.split(run)
    assert sorted(out) == [0, 1, 2, 3], res.stdout
    return out


def _split_docker(argv: list[str]) -> tuple[dict[str, str], list[str], str, str, list[str]]:
    """(env, volumes, entrypoint, image, the server argv) of a `docker run` argv."""
    env, vols, entry, i = {}, [], "", argv.index("run") + 1
    while argv[i].startswith("-"):
        flag = argv[i]
        takes = flag in ("-e", "-v", "--name", "--restart", "--network", "--ipc", "--cap-add", "--gpus",
                         "--shm-size", "--memory", "--memory-swap", "--ulimit", "--device", "--oom-score-adj",
                         "--entrypoint")  # fmt: skip
        if flag == "-e":
            k, _, v = argv[i + 1].partition("=")
            env[k] = v
        elif flag == "-v":
            vols.append(argv[i + 1])
        elif flag == "--entrypoint":
            entry = argv[i + 1]
        i += 2 if takes else 1
    return env, vols, entry, argv[i], argv[i + 1 :]


# What the kit probes or sets per node, and how sparkfleet gets each: not recipe facts.
AIDEN_NODE_KEYS = {
    "HOST_IP", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_GID_INDEX",
    "B12X_ROCE_HCA", "B12X_ROCE_GID_INDEX", "NCCL_NET", "NCCL_IB_DISABLE",
}  # fmt: skip


def test_aiden_lane_runs_what_production_sh_runs(tmp_path, monkeypatch):
    kit = _verified_kit("dsv41-flash-4x-aiden", tmp_path)
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    inv = _fleet(tmp_path)
    commands = _aiden_kit_commands(kit, inv, tmp_path)
    plan = dry_run(inv, "dsv41-flash-4x-aiden")
    snap = "/models/repo/snapshots/" + inv.pins["dsv41-flash"].value
    for spec in plan.by_rank():
        env, vols, entry, image, argv = _split_docker(commands[spec.rank])
        assert image == "aidendle94/sparkrun-sglang-dsv41-gb10:production-1.2"
        assert image.split(":")[0] in spec.image
        assert entry == (spec.entrypoint or "")
        ours = list(spec.argv)
        want = [("<MODEL_PATH unknown>" if a == snap else a) for a in argv]
        assert _same_argv(want, ours), f"rank {spec.rank}:\n kit  {want}\n ours {ours}"
        # the engram rows: the shards rank reads the checkpoint, every other its /engram-local copy
        if spec.rank == 0:
            assert (
                env["SPARK_ENGRAM_DIR"] == snap and spec.env["SPARK_ENGRAM_ROWS"] == env["SPARK_ENGRAM_ROWS"]
            )
        else:
            assert env["SPARK_ENGRAM_DIR"] == spec.env["SPARK_ENGRAM_DIR"] == "/engram-local"
            assert any(v.endswith(":/engram-local:ro") for v in vols)
            assert any(b.target == "/engram-local" and b.read_only for b in spec.binds)
        rest = {
            k: v for k, v in env.items() if k not in AIDEN_NODE_KEYS and not k.startswith("SPARK_ENGRAM_DIR")
        }
        rest.pop("SPARK_ENGRAM_ROWS", None)
        wrong = {k: (v, spec.env.get(k)) for k, v in rest.items() if spec.env.get(k) != v}
        assert not wrong, f"rank {spec.rank}: kit env vs ours {wrong}"


# ---- the EXL3 kit: portable_node.docker_command() -------------------------------------------------


def _load(path: Path, name: str):
    """The kit's module at `path`, imported under a name of ours (nothing of it is kept in sys.modules)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _exl3_config(kit: Path, inv: inventory.Inventory) -> dict:
    """The deployment config release/launch.py prepare() builds, for this fleet's two hosts.

    The serving profile comes from the kit's own release/config.load() over .env.ds41.example (the
    tested profile) with this fleet's operator values; the host fields are placeholders the node
    command only copies (paths, uid/gid, image ID). It goes through JSON with sort_keys=True as
    launch.py writes it and portable_pair.py hands it to each node.
    """
    kit_config = _load(kit / "release" / "config.py", "kit_exl3_config")  # the kit's release/config.py
    example = {}
    for line in (kit / ".env.ds41.example").read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            k, _, v = line.partition("=")
            example[k] = v
    launch = _recipe("dsv41-flash-exl3-2x")["launch"]
    lane = inv.lane("dsv41-flash-exl3-2x")
    head, worker = (inv.host(h) for h in lane.hosts)
    example.update(
        WORKER_HOST=worker.address, HEAD_FABRIC_IP=head.fabric_ip, WORKER_FABRIC_IP=worker.fabric_ip,
        FABRIC_NETWORK=str(ipaddress.ip_network(f"{head.fabric_ip}/24", strict=False)),
        API_PORT=str(launch["port"]), SERVED_MODEL_NAME=launch["served_model_name"],
        HEAD_SECONDARY_IP="", WORKER_SECONDARY_IP="", HEAD_SECONDARY_IFNAME="", WORKER_SECONDARY_IFNAME="",
        HEAD_SECONDARY_HCA="", WORKER_SECONDARY_HCA="", DS41_CACHE_DIR="/srv/ds41/assets",
    )  # fmt: skip
    settings = kit_config.load(kit, environ=example)
    nodes = []
    for i, rails in enumerate(settings["rails"]):
        node = {
            "ssh": None if i == 0 else settings["worker"], "kit": "/srv/ds41/kit", "model": "/srv/ds41/model",
            "model_receipt": "/srv/ds41/receipt/model.json", "image": "sha256:" + "0" * 64,
            "cache": "/srv/ds41/cache", "runs": "/srv/ds41/runs", "draft": "/srv/ds41/draft",
            "uid": 1000, "gid": 1000, "drm_card": "/dev/dri/card0", "drm_gid": 44, "rails": rails, **rails[0],
        }  # fmt: skip
        nodes.append(node)
    digest = "0" * 64
    config = dict(
        format="ds41_two_spark_deployment_v1", run_id="ds41-release-v1", kit_manifest_sha256=digest,
        model_manifest_sha256=digest, cache_manifest_sha256=digest, fabric_network=settings["fabric_network"],
        nodes=nodes, serving=settings["serving"], api=settings["api"],
        startup_memory_override=settings["startup_memory_override"],
    )  # fmt: skip
    return json.loads(json.dumps(config, sort_keys=True))


EXL3_NODE_KEYS = {"NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME",
                  "TP_SOCKET_IFNAME", "NCCL_IB_MERGE_NICS"}  # fmt: skip


def test_exl3_lane_runs_what_portable_node_runs(tmp_path, monkeypatch):
    kit = _verified_kit("dsv41-flash-exl3-2x", tmp_path)
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    inv = _fleet(tmp_path)
    config = _exl3_config(kit, inv)
    tools = kit / EXL3_RUNTIME / "tools"
    monkeypatch.syspath_prepend(str(tools))  # portable_node imports launch_profile from beside it
    portable_node = _load(tools / "portable_node.py", "kit_exl3_portable_node")
    plan = dry_run(inv, "dsv41-flash-exl3-2x")
    # the AOT library: bound where the kit binds it, checked against the kit's own manifest, which
    # lists it at portable_node.py's AOT_SHA (the recipe restates no sha256)
    trees = {t["target"]: t for t in _recipe("dsv41-flash-exl3-2x")["launch"]["trees"]}
    aot = trees[portable_node.AOT_TARGET]
    assert aot["path"] == f"{EXL3_RUNTIME}/aot/{portable_node.AOT_NAME}" and "sha256" not in aot
    assert aot["manifest"] == f"{EXL3_RUNTIME}/bundle-manifest.json"
    # the kit's manifest is data, read from the checkout itself ([kit.sources] does not name it)
    listed = json.loads((_kit_checkout("dsv41-flash-exl3-2x") / aot["manifest"]).read_text())["files"]
    so = f"aot/{portable_node.AOT_NAME}/{portable_node.AOT_NAME}.so"
    assert listed[so]["sha256"] == portable_node.AOT_SHA
    for name in trees["/opt/ds41-serving"]["needs"]:  # the kit's manifest lists each file the lane needs
        assert f"serving/{name}" in listed, name
    for spec in plan.by_rank():
        node = portable_node.docker_command(config, spec.rank)
        added = _recipe("dsv41-flash-exl3-2x")["kit"]["ours_added"]
        want = [("<MODEL_PATH unknown>" if a == "/model" else a) for a in node["cmd"]]
        headless = ["--headless"] if want[-1:] == ["--headless"] else []
        want = want[: len(want) - len(headless)] + added + headless
        assert _same_argv(want, list(spec.argv)), f"rank {spec.rank}:\n kit  {want}\n ours {list(spec.argv)}"
        command = node["command"]
        assert command[command.index("--entrypoint=" + spec.entrypoint)] == "--entrypoint=" + spec.entrypoint
        ours_env = dict(spec.env)  # the key guard's folder goes first on the kit's own PYTHONPATH
        ours_env["PYTHONPATH"] = ours_env.get("PYTHONPATH", "").removeprefix(KEY_GUARD_MOUNT + ":")
        wrong = {
            k: (v, ours_env.get(k))
            for k, v in node["env"].items()
            if k not in EXL3_NODE_KEYS and ours_env.get(k) != v
        }
        assert not wrong, f"rank {spec.rank}: kit env vs ours {wrong}"
        targets = {target for _, target, _ in node["mounts"]}
        assert {"/model", "/draft-exl3", "/cache"} <= targets
        kit_mounts = {m["target"] for m in _recipe("dsv41-flash-exl3-2x")["kit"]["mounts"]}
        assert targets == kit_mounts, "[kit.mounts] must list every mount the kit makes"
        # the kit's box: every `docker create` flag but its name, labels, mounts, env and entrypoint
        # is in what sparkfleet runs, on docker and podman: the DRM card and its group too
        node_cfg = config["nodes"][spec.rank]
        flags = _kit_box(command[2 : command.index(node_cfg["image"])])
        recorded = _recipe("dsv41-flash-exl3-2x")["kit"]["container"]
        user = f"{node_cfg['uid']}:{node_cfg['gid']}"
        card = {"DRM_CARD": node_cfg["drm_card"], "DRM_GID": str(node_cfg["drm_gid"])}
        recorded_pairs = kit_pairs(recorded["flags"], user, card)
        assert kit_pairs(flags, user) == recorded_pairs, "[kit.container] is the kit's"
        assert spec.display is not None and spec.display.card == node_cfg["drm_card"]
        for engine in ("docker", "podman"):
            argv = container_run_argv(spec, engine, Path("/st/r.env"), user, node_cfg["drm_gid"])
            ours = run_pairs(argv, spec.image)
            lacking = missing_flags(kit_pairs(flags, user), ours)
            assert lacking == ([("--gpus", "all")] if engine == "podman" else []), (engine, lacking)


def _kit_box(args: list[str]) -> list[str]:
    """portable_node.py's `docker create` args less what is not the box: --name, --label, --mount,
    --env, --entrypoint (compared above); `--user U:G` and `--group-add G` written `--key=value`."""
    out, i = [], 0
    while i < len(args):
        a = args[i]
        if a in ("--name", "--label", "--mount", "--env"):
            i += 2
            continue
        if a in ("--user", "--group-add"):
            out.append(f"{a}={args[i + 1]}")
            i += 2
            continue
        if not a.startswith("--entrypoint="):
            out.append(a)
        i += 1
    return out
