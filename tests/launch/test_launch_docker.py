"""The docker and podman runtimes end to end, on real engines, in network-namespace fleet hosts.

dgx1 runs its own dockerd (started inside its namespace by the fixture, stopped by PID); dgx2 runs
podman 4.3 with runc/cgroupfs and a private store. Each host's ssh sessions get the engine's env
from sshd (`SetEnv`), the way a real host's environment tells docker/podman where they are. The
image is built here, not pulled: a minimal rootfs (dash, python3 + stdlib, sparkfleet's demo
OpenAI server) as a docker-archive behind a stream script, which is what `nix build
.#mia-tp4-image` gives. Emulated, not real: no GPU (gpus = "none"), no RoCE (fabric = "none"),
memlock is capped at this machine's hard limit (8192) on dgx1 and podman gets no --ulimit on dgx2.

Asserted: `image load` records each host's image ID (= the build's, read from the archive) and
keeps the previous one; reruns load nothing; launch runs the recorded ID, env arrives from the
0600 env file (not argv), model binds are read-only, the record names the container's real ID,
stop removes exactly our container and leaves a look-alike running; a host whose image ID is not
the build's is refused by launch and doctor with ExitCode.REFUSED.
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from support.lanefleet import MODELS, netns_fields, use_ssh, write_fleet

try:
    from support.engines import (
        Dockerd,
        docker_archive,
        engines_skip_reason,
        layer_tar,
        make_rootfs,
        podman_cleanup,
        podman_env,
        stream_script,
    )
except ImportError:  # tests/ imported as a package
    from tests.support.engines import (
        Dockerd,
        docker_archive,
        engines_skip_reason,
        layer_tar,
        make_rootfs,
        podman_cleanup,
        podman_env,
        stream_script,
    )

from sparkfleet.base.errors import ExitCode
from sparkfleet.cli import main as cli
from sparkfleet.demo.hubfixture import build_nas_hub
from sparkfleet.fleet import inventory
from sparkfleet.images.load import load as load_image
from sparkfleet.lane.recipe import launch_recipe
from sparkfleet.launch import lane as lanes
from sparkfleet.node.records import load_all

# One worker runs this module (make test's xdist): its module-scoped fixture is built once.
pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.xdist_group("launch_docker")]
SECRET = "hf_engine_test_secret_value"
PORT = 30000
ENGINE_OF = {"ld": ("dgx1", "docker"), "lp": ("dgx2", "podman")}


def recipe(host: str, runtime: str) -> str:
    script = (
        "env > /cache/env.out; "
        "if (echo tamper >> {model_path}/config.json) 2>/dev/null; then echo writable; else echo readonly; fi"
        " > /cache/ro.out; "
        "exec python3 -m sparkfleet.demo.openai_server --host 0.0.0.0 --port {port}"
        " --served-model-name {served_model_name} --boot-delay 0.5"
    )
    return (
        f"""
[lane]
hosts = ["{host}"]

[world]
tp = 1

[launch]
runtime = "{runtime}"
image_build = "test-image"
port = {PORT}
served_model_name = "engine-test"
fabric = "none"
gpus = "none"
shm_size = "64m"
command = ["sh", "-c", {json.dumps(script)}]
[launch.env]
HF_TOKEN = "{SECRET}"
[launch.timeouts]
ready_s = 90
poll_s = 0.3
stop_s = 5
"""
        + MODELS
    )


@pytest.fixture(scope="module")
def engines(fleetnet, tmp_path_factory):
    for engine in ("docker", "podman"):
        if reason := engines_skip_reason(engine):
            pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("engines")
    pod_base = Path(fleetnet.unique_dir("podman"))
    pod_env = podman_env(pod_base)
    dockerd = Dockerd()
    hosts = {}
    try:
        hosts["dgx1"] = fleetnet.add_host("dgx1", env={"DOCKER_HOST": dockerd.host}, share_mounts=True)
        dockerd.start(hosts["dgx1"].netns)  # inside dgx1's namespace: --network host is dgx1's network
        hosts["dgx2"] = fleetnet.add_host("dgx2", env=pod_env, share_mounts=True)
        with pytest.MonkeyPatch.context() as mp:
            yield from _fleet(fleetnet, hosts, tmp, mp, dockerd)
    finally:
        dockerd.stop()
        podman_cleanup(pod_env, pod_base)
        for h in hosts.values():
            fleetnet.remove_host(h)


def _fleet(fleetnet, hosts, tmp, monkeypatch, dockerd):
    nas = build_nas_hub(fleetnet.unique_dir("nas") / "hub", shard_bytes=16 * 1024)
    use_ssh(monkeypatch, tmp / "ssh_config")
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp / "operator-state"))
    fields = {name: netns_fields(h, nas.root) for name, h in hosts.items()}
    # This machine's hard memlock limit is 8192: `--ulimit memlock=-1` is refused. podman 4.3 adds
    # nofile/nproc = 1048576 beside any --ulimit, which this machine refuses too: dgx2 passes none.
    fields["dgx1"]["ulimits"] = {"memlock": 8192, "stack": 67108864}
    fields["dgx2"]["ulimits"] = {}
    for name in ("local1", "local2"):  # two hosts that are this machine: one engine, two records
        fields[name] = {"address": "localhost", "ssh_user": "root", "local_hub": str(tmp / name / "hub"),
                        "nas_hub": str(nas.root), "state_dir": str(tmp / name / "state")}  # fmt: skip
    two = recipe("local1", "docker").replace('hosts = ["local1"]', 'hosts = ["local1", "local2"]')
    root = write_fleet(
        tmp / "fleet", fields, {"ld": recipe("dgx1", "docker"), "lp": recipe("dgx2", "podman"), "both": two}
    )
    layer = layer_tar(make_rootfs(tmp / "rootfs"))
    builds = {}
    for version in ("v1", "v2"):  # one layer, two configs: two image IDs
        archive = tmp / f"image-{version}.tar"
        image_id = docker_archive(layer, archive, f"sparkfleet-test/lane:{version}", version)
        builds[version] = (image_id, archive, stream_script(archive, tmp / f"result-{version}"))
    inv = inventory.load(root)
    try:
        yield {"inv": inv, "hosts": hosts, "nas": nas, "builds": builds, "dockerd": dockerd, "tmp": tmp,
               "layer": layer}  # fmt: skip
    finally:
        for lane in ENGINE_OF:
            lanes.stop(inv, lane, 5)


def on_host(env, host: str, *argv: str) -> subprocess.CompletedProcess:
    """Run argv on a fleet host over real ssh (its sshd sets the engine's env)."""
    import shlex

    return subprocess.run(env["hosts"][host].ssh_argv(shlex.join(argv)), capture_output=True, text=True)


def cli_run(env, *args: str):
    return CliRunner().invoke(cli, ["--root", str(env["inv"].root), *args])


def test_image_load_records_each_hosts_image_and_keeps_the_previous(engines):
    env = engines
    (v1, _, script1), (v2, archive2, _) = env["builds"]["v1"], env["builds"]["v2"]
    for lane, (host, engine) in ENGINE_OF.items():
        dry = cli_run(env, "image", "load", lane, "--image", str(script1), "--dry-run", "--json")
        assert dry.exit_code == 0, dry.output
        assert json.loads(dry.output)["hosts"][0]["action"] == "load"
        assert on_host(env, host, engine, "image", "inspect", v1).returncode != 0  # dry run loaded nothing

        first = cli_run(env, "image", "load", lane, "--image", str(script1), "--json")  # the stream script
        assert first.exit_code == 0, first.output
        doc = json.loads(first.output)
        assert doc["build"]["image_id"] == v1 and doc["build"]["kind"] == "stream"
        assert [(h["host"], h["action"], h["image_id"]) for h in doc["hosts"]] == [(host, "loaded", v1)]
        got = on_host(
            env, host, engine, "image", "inspect", "--format", "{{.Id}}", f"sparkfleet/{lane}:current"
        )
        assert got.stdout.strip().removeprefix("sha256:") == v1.removeprefix("sha256:"), got.stderr
        record = json.loads((env["hosts"][host].root / "state" / "images" / f"{lane}.json").read_text())
        assert record["image_id"] == v1 and record["previous_image_id"] is None

        again = cli_run(env, "image", "load", lane, "--image", str(script1), "--json")
        assert json.loads(again.output)["hosts"][0]["action"] == "unchanged"  # rerun: nothing loaded

        counted: list[tuple[str, int]] = []
        image = launch_recipe(env["inv"], lane)
        second = load_image(env["inv"], image, archive2, on_bytes=lambda h, n, c=counted: c.append((h, n)))
        (h,) = second.hosts
        assert (h.action, h.image_id, h.previous_image_id) == ("loaded", v2, v1)
        assert {x for x, _ in counted} == {host} and sum(n for _, n in counted) == archive2.stat().st_size
        prev = on_host(
            env, host, engine, "image", "inspect", "--format", "{{.Id}}", f"sparkfleet/{lane}:previous"
        )
        assert prev.stdout.strip().removeprefix("sha256:") == v1.removeprefix("sha256:")  # kept for rollback
    op = json.loads((env["tmp"] / "operator-state" / "images" / "ld.json").read_text())
    assert op["build"]["image_id"] == v2 and op["previous_build"]["image_id"] == v1
    assert op["hosts"]["dgx1"]["image_id"] == v2


@pytest.mark.parametrize("lane", ["ld", "lp"])
def test_container_lane_end_to_end(engines, lane):
    env = engines
    host, engine = ENGINE_OF[lane]
    v2 = env["builds"]["v2"][0]
    if cli_run(env, "image", "load", lane, "--image", str(env["builds"]["v2"][2])).exit_code != 0:
        pytest.fail("image load failed")
    report = lanes.launch(env["inv"], lane, allow_nas_weights=True)
    state = env["hosts"][host].root / "state"
    try:
        assert report.ready.ok, (report.ready.reason, report.ready.tail)
        (rec,) = load_all(state, lane)
        # launch recorded the container's real identity, and it runs the build's image ID
        cid = on_host(env, host, engine, "inspect", "--format", "{{.Id}}", rec.name).stdout.strip()
        assert rec.container_id == cid and len(cid) == 64
        image = on_host(env, host, engine, "inspect", "--format", "{{.Image}}", cid).stdout.strip()
        assert image.removeprefix("sha256:") == v2.removeprefix("sha256:")
        # env from the 0600 env file, never on a command line
        env_file = Path(rec.log_path).with_suffix(".env")
        assert env_file.stat().st_mode & 0o777 == 0o600
        cache = state / "cache" / lane
        inside = dict(ln.split("=", 1) for ln in (cache / "env.out").read_text().splitlines() if "=" in ln)
        assert inside["HF_TOKEN"] == SECRET and inside["NODE_RANK"] == "0" and inside["TP_SIZE"] == "1"
        cmdlines = [p.read_bytes() for p in Path("/proc").glob("[0-9]*/cmdline") if p.exists()]
        assert not any(SECRET.encode() in c for c in cmdlines)
        # model binds are read-only: the container could not append to the bound config.json
        assert (cache / "ro.out").read_text().strip() == "readonly"
        assert b"tamper" not in next(env["nas"].root.rglob("config.json")).read_bytes()
        # a look-alike (same lane label, similar name) that sparkfleet did not start
        other = on_host(env, host, engine, "run", "-d", "--name", f"{rec.name}-bystander", "--label",
                        f"sparkfleet.lane={lane}", "--network", "host", v2, "sleep", "300")  # fmt: skip
        assert other.returncode == 0, other.stderr
        other_id = other.stdout.strip().splitlines()[-1]
        stopped = cli_run(env, "stop", lane, "--json")
        assert stopped.exit_code == 0, stopped.output
        assert on_host(env, host, engine, "inspect", cid).returncode != 0  # ours: removed
        running = on_host(env, host, engine, "inspect", "--format", "{{.State.Running}}", other_id)
        assert running.stdout.strip() == "true"  # the look-alike: untouched
        assert load_all(state, lane) == []
    finally:
        lanes.stop(env["inv"], lane, 5)
        on_host(env, host, engine, "rm", "-f", f"sparkfleet-{lane}-r0-bystander")


def test_launch_and_doctor_refuse_a_host_whose_image_is_not_the_build(engines):
    env = engines
    v1, v2 = env["builds"]["v1"][0], env["builds"]["v2"][0]
    assert cli_run(env, "image", "load", "ld", "--image", str(env["builds"]["v2"][1])).exit_code == 0
    record = env["tmp"] / "operator-state" / "images" / "ld.json"
    saved = record.read_text()
    doc = json.loads(saved)
    assert doc["build"]["image_id"] == v2
    doc["build"]["image_id"] = v1  # the operator built v1 again; dgx1 still holds v2
    record.write_text(json.dumps(doc))
    try:
        res = cli_run(env, "launch", "ld", "--allow-nas-weights")
        assert res.exit_code == ExitCode.REFUSED, res.output
        assert "dgx1: holds " + v2 in res.output and "image load ld" in res.output
        assert load_all(env["hosts"]["dgx1"].root / "state", "ld") == []  # nothing started
        doc_res = cli_run(env, "doctor", "ld", "--json")
        assert doc_res.exit_code == ExitCode.REFUSED, doc_res.output
        image_check = [c for c in json.loads(doc_res.output)["checks"] if c["name"] == "image"]
        assert image_check and image_check[0]["ok"] is False and v1 in image_check[0]["detail"]
    finally:
        record.write_text(saved)
    ok = cli_run(env, "doctor", "ld", "--json")
    checks = {c["name"]: c for c in json.loads(ok.output)["checks"]}
    assert checks["image"]["ok"] is True, checks["image"]


def test_image_load_streams_to_several_hosts_at_once(engines, monkeypatch):
    env = engines
    monkeypatch.setenv("DOCKER_HOST", env["dockerd"].host)  # local1/local2 are this machine
    archive1 = env["tmp"] / "image-v3.tar"  # a build no engine here has seen
    v1 = docker_archive(env["layer"], archive1, "sparkfleet-test/lane:v3", "v3")
    counted: dict[str, int] = {}
    lock = threading.Lock()

    def count(host: str, n: int) -> None:
        with lock:
            counted[host] = counted.get(host, 0) + n

    report = load_image(env["inv"], launch_recipe(env["inv"], "both"), archive1, on_bytes=count, jobs=2)
    assert [(h.host, h.action, h.image_id) for h in report.hosts] == [("local1", "loaded", v1),
                                                                     ("local2", "loaded", v1)]  # fmt: skip
    # one engine behind both: a host that asks after the other's load finds the image and streams
    # nothing; any host that streams sends the whole archive
    size = archive1.stat().st_size
    assert set(counted.values()) <= {size} and sum(counted.values()) >= size
    for name in ("local1", "local2"):
        rec = json.loads((env["tmp"] / name / "state" / "images" / "both.json").read_text())
        assert rec["image_id"] == v1
