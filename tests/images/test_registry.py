"""The fleet registry for real: Debian's docker-registry (distribution 2.8) with TLS from a fleet CA,
in its own network namespace; skopeo pushes the built archive by digest; docker (a private dockerd
in another namespace) and podman pull that digest and record the RepoDigest; a second pull of the
same digest moves nothing; a release tag is never moved.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

try:
    from support.engines import (
        Dockerd,
        docker_archive,
        engines_skip_reason,
        layer_tar,
        make_rootfs,
        podman_cleanup,
        podman_env,
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
    )

from sparkfleet.images import registry as reg_mod
from sparkfleet.images.registry import RegistryError

try:
    from support.registryfleet import served_registry
except ImportError:  # tests/ imported as a package
    from tests.support.registryfleet import served_registry

# One worker runs this module (make test's xdist): its module-scoped fixture is built once.
pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.xdist_group("registry")]
PORT = 5000


@pytest.fixture(scope="module")
def registry(fleetnet, tmp_path_factory):
    """`registry init` + `registry serve` at <netns addr>:5000 (pulls) and :5001 (pushes), with the
    documented layout on the operator's side; torn down (by PID) even on failure."""
    if shutil.which("docker-registry") is None or shutil.which("skopeo") is None:
        pytest.fail("docker-registry and skopeo are test dependencies (Makefile DEB_PACKAGES)")
    tmp = tmp_path_factory.mktemp("registry")
    certs_d = None
    with served_registry(fleetnet, tmp, "reg", PORT) as served:
        try:
            # docker trusts the fleet CA for this one registry (what bootstrap installs on a host)
            certs_d = Path("/etc/docker/certs.d") / served.reg.address
            certs_d.mkdir(parents=True, exist_ok=True)
            shutil.copy(served.reg.cert_dir / "ca.crt", certs_d / "ca.crt")
            yield served.reg, served.host, tmp
        finally:
            if certs_d is not None:
                shutil.rmtree(certs_d, ignore_errors=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("build")
    layer = layer_tar(make_rootfs(tmp / "rootfs"))
    archive = tmp / "image.tar"
    image_id = docker_archive(layer, archive, "sparkfleet/lane:build", "r1")
    return archive, image_id


def test_push_by_digest_pull_with_docker_and_podman_second_pull_moves_nothing(
    registry, built, fleetnet, tmp_path
):
    reg, host, _ = registry
    archive, image_id = built
    digest = reg_mod.push(reg, archive, "sparkfleet/lane", "build-r1")
    assert digest.startswith("sha256:") and reg_mod.digest_of(reg, "sparkfleet/lane", "build-r1") == digest
    assert reg_mod.push(reg, archive, "sparkfleet/lane", "build-r1") == digest  # same bytes, same digest

    reason = engines_skip_reason("docker")
    if reason:
        pytest.fail(reason)
    node = fleetnet.add_host("dnode", share_mounts=True)
    dockerd = Dockerd()
    try:
        dockerd.start(node.netns)
        argv = reg_mod.pull_argv("docker", reg, "sparkfleet/lane", digest)
        first = dockerd.docker(*argv[1:])
        assert first.returncode == 0, first.stderr
        held = dockerd.docker(
            "image",
            "inspect",
            "--format",
            "{{.Id}} {{json .RepoDigests}}",
            f"{reg.address}/sparkfleet/lane@{digest}",
        ).stdout
        assert image_id in held and f"{reg.address}/sparkfleet/lane@{digest}" in held  # RepoDigest kept
        again = dockerd.docker("pull", reg.ref("sparkfleet/lane", digest=digest))
        assert "Image is up to date" in again.stdout  # a second pull of the digest: nothing sent
        denv = {**os.environ, "DOCKER_HOST": dockerd.host}
        assert not reg_mod.ensure_pulled("docker", reg, "sparkfleet/lane", digest, env=denv)
    finally:
        dockerd.stop()
        fleetnet.remove_host(node)

    base = tmp_path / "podman"
    env = podman_env(base)
    full = {**os.environ, **env}
    trust = tmp_path / "certs.d" / reg.address  # the host's side, as bootstrap installs it: ca.crt only
    trust.mkdir(parents=True)
    shutil.copy(reg.cert_dir / "ca.crt", trust / "ca.crt")
    reg = dataclasses.replace(reg, cert_dir=trust)
    try:
        cp = subprocess.run(reg_mod.pull_argv("podman", reg, "sparkfleet/lane", digest), env=full,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
        assert cp.returncode == 0, cp.stderr
        ref = reg.ref("sparkfleet/lane", digest=digest)
        assert ref in reg_mod.repo_digests("podman", ref, env=full)
        assert not reg_mod.ensure_pulled("podman", reg, "sparkfleet/lane", digest, env=full)  # held: no pull
    finally:
        podman_cleanup(env, base)


def test_a_tag_is_never_moved_to_another_digest(registry, built, tmp_path):
    reg, _, _ = registry
    archive, _ = built
    digest = reg_mod.push(reg, archive, "sparkfleet/tags", "build")
    reg_mod.tag(reg, "sparkfleet/tags", digest, "r39")
    assert reg_mod.digest_of(reg, "sparkfleet/tags", "r39") == digest
    reg_mod.tag(reg, "sparkfleet/tags", digest, "r39")  # the same digest again: fine
    other = tmp_path / "other.tar"
    docker_archive(b"\0" * 1024, other, "sparkfleet/other:build", "r2")
    d2 = reg_mod.push(reg, other, "sparkfleet/tags", "build2")
    with pytest.raises(RegistryError, match="never moved"):
        reg_mod.tag(reg, "sparkfleet/tags", d2, "r39")
    assert reg_mod.digest_of(reg, "sparkfleet/tags", "r39") == digest


def test_release_cut_freezes_only_a_promoted_generation_and_never_overwrites(
    registry, built, tmp_path, monkeypatch
):
    from click.testing import CliRunner

    from sparkfleet.cli import main as cli
    from sparkfleet.launch import generations
    from support.lanefleet import demo_recipe, write_fleet

    reg, _, _ = registry
    archive, image_id = built
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SPARKFLEET_REGISTRY", reg.address)
    monkeypatch.setenv("SPARKFLEET_REGISTRY_CERTS", str(reg.cert_dir))
    monkeypatch.setenv("SPARKFLEET_REGISTRY_AUTH", str(reg.authfile))
    host = {"address": "127.0.0.1", "ssh_user": "root", "local_hub": str(tmp_path / "hub"),
            "nas_hub": str(tmp_path / "nas"), "state_dir": str(tmp_path / "s")}  # fmt: skip
    root = write_fleet(tmp_path / "fleet", {"spark": host}, {"lane": demo_recipe(["spark"], 30000)})
    runner = CliRunner()
    res = runner.invoke(
        cli, ["--root", str(root), "image", "push", "lane", "--image", str(archive), "--json"]
    )
    assert res.exit_code == 0, res.output
    pushed = json.loads(res.output)
    assert pushed["image_id"] == image_id and pushed["digest"].startswith("sha256:")

    gen = {"id": "20261201T210000000Z", "lane": "lane", "created_at": 0.0, "status": "ready", "good": False,
           "image_ids": {"spark": image_id}, "pins": {"lane-image": {"value": "x"}},
           "recipe_sha256": hashlib.sha256(b"r").hexdigest(), "recipe_text": "r", "fleet_text": "f",
           "fingerprints": {"spark": {"kernel": "6.8"}}}  # fmt: skip
    generations.save(root, gen)
    cut = ["--root", str(root), "release", "cut", "lane", "r39"]
    res = runner.invoke(cli, cut)
    assert res.exit_code == 5 and "never promoted" in res.output, res.output
    assert reg_mod.digest_of(reg, "sparkfleet/lane", "r39") is None
    assert not (root / "recipes" / "lane" / "releases").exists()

    gen.update(good=True, promotion={"bench_report": "reports/x.json", "gate": "baseline y", "smoke": []})
    generations.save(root, gen)
    res = runner.invoke(cli, [*cut, "--json"])
    assert res.exit_code == 0, res.output
    record = root / "recipes" / "lane" / "releases" / "r39.json"
    rel = json.loads(record.read_text())
    assert rel["generation"] == gen["id"] and rel["image"]["digest"] == pushed["digest"]
    assert rel["reports"]["bench"] == "reports/x.json"
    assert rel["recipe_sha256"] == hashlib.sha256(b"r").hexdigest()
    assert rel["fingerprints"] == {"spark": {"kernel": "6.8"}}
    assert oct(record.stat().st_mode & 0o777) == "0o444"
    assert reg_mod.digest_of(reg, "sparkfleet/lane", "r39") == pushed["digest"]

    before = record.read_bytes()
    res = runner.invoke(cli, cut)
    assert res.exit_code == 5 and "never overwritten" in res.output
    assert record.read_bytes() == before

    gen2 = {**gen, "id": "20261201T220000000Z", "image_ids": {"spark": "sha256:" + "cd" * 32}}
    generations.save(root, gen2)
    res = runner.invoke(cli, ["--root", str(root), "release", "cut", "lane", "r40"])
    assert res.exit_code == 5 and "is not the one generation" in res.output
    assert not (root / "recipes" / "lane" / "releases" / "r40.json").exists()


def _lane_recipe(host: str, runtime: str) -> str:
    from support.lanefleet import MODELS

    return (
        f"""
[lane]
hosts = ["{host}"]

[world]
tp = 1

[launch]
runtime = "{runtime}"
image_build = "test-image"
port = 30000
fabric = "none"
gpus = "none"
command = ["true"]
"""
        + MODELS
    )


def test_image_load_pulls_by_digest_on_docker_and_podman_hosts_and_falls_back_to_ssh(
    registry, built, fleetnet, tmp_path, monkeypatch
):
    """`image load` after `image push`: each host pulls the digest (docker in dgx1's namespace,
    podman on dgx2), records the RepoDigest, a rerun moves nothing; with the registry unreachable
    a new build still arrives over the ssh stream."""

    from sparkfleet.fleet import inventory
    from sparkfleet.images.load import load as load_image
    from sparkfleet.images.node import read_record
    from sparkfleet.images.push import push_lane
    from sparkfleet.lane.recipe import launch_recipe
    from support.lanefleet import netns_fields, use_ssh, write_fleet

    try:
        from support.engines import stream_script
    except ImportError:
        from tests.support.engines import stream_script

    for engine in ("docker", "podman"):
        if reason := engines_skip_reason(engine):
            pytest.fail(reason)
    reg, _, _ = registry
    archive, image_id = built
    pod_base = tmp_path / "podman"
    pod_env = podman_env(pod_base)
    podman_trust = Path("/etc/containers/certs.d") / reg.address
    podman_trust.mkdir(parents=True, exist_ok=True)
    shutil.copy(reg.cert_dir / "ca.crt", podman_trust / "ca.crt")
    dockerd = Dockerd()
    hosts = {}
    try:
        hosts["dgx1"] = fleetnet.add_host("dgx1", env={"DOCKER_HOST": dockerd.host}, share_mounts=True)
        dockerd.start(hosts["dgx1"].netns)
        hosts["dgx2"] = fleetnet.add_host("dgx2", env=pod_env, share_mounts=True)
        use_ssh(monkeypatch, tmp_path / "ssh_config")
        monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "operator"))
        fields = {name: netns_fields(h, tmp_path / "nas") for name, h in hosts.items()}
        lanes_ = {"ld": _lane_recipe("dgx1", "docker"), "lp": _lane_recipe("dgx2", "podman")}
        root = write_fleet(tmp_path / "fleet", fields, lanes_)
        inv = inventory.load(root)
        streamed: list[int] = []
        for lane, host in (("ld", "dgx1"), ("lp", "dgx2")):
            pushed = push_lane(inv, lane, archive, reg)
            seen: list[str] = []
            image = launch_recipe(inv, lane)
            report = load_image(
                inv, image, archive, on_event=seen.append, on_bytes=lambda _h, n: streamed.append(n)
            )
            assert [h.action for h in report.hosts] == ["loaded"], report.hosts
            assert not any("streaming over ssh" in e for e in seen), seen
            rec = read_record(hosts[host].root / "state", lane)
            assert rec["image_id"] == image_id
            assert rec["repo_digest"] == f"{reg.address}/sparkfleet/{lane}@{pushed['digest']}"
            again = load_image(inv, image, archive)
            assert [h.action for h in again.hosts] == ["unchanged"]
        assert sum(streamed) == 0  # both came by registry pull, nothing over ssh

        # the RepoDigest gone while the ID stays (docker rmi REPO@DIGEST; a docker load of the same
        # ID does the same): held by ID alone is not held; load pulls the digest again, no layer
        ref = read_record(hosts["dgx1"].root / "state", "ld")["repo_digest"]
        rmi = subprocess.run(["docker", "-H", dockerd.host, "rmi", ref], capture_output=True, text=True)
        assert rmi.returncode == 0 and "Untagged" in rmi.stdout, rmi.stdout + rmi.stderr
        from sparkfleet.images.node import image_state
        from sparkfleet.node.protocol import ImageStateRequest

        req = ImageStateRequest(lane="ld", state_dir=str(hosts["dgx1"].root / "state"), engine="docker")
        with monkeypatch.context() as mp:
            mp.setenv("DOCKER_HOST", dockerd.host)
            st = image_state(req)
        assert st["recorded"] == image_id and st["repo_digest_present"] is False and not st["present"]
        from sparkfleet.ops.doctor import built_image_check

        check = built_image_check("dgx1", launch_recipe(inv, "ld"), image_id, None, st)
        assert check.ok is False and f"no longer its RepoDigest {ref}" in check.detail, check
        from sparkfleet.launch.plan import check_built_image

        with pytest.raises(Exception) as refused:  # launch's gate, on the same real engine's answer
            check_built_image(launch_recipe(inv, "ld"), image_id, {"dgx1": st})
        said = refused.value.message  # host, lane, the lost digest and the command that pulls it again
        assert "lane ld: " in said and f"dgx1: holds {image_id} but no longer its RepoDigest {ref}" in said
        assert refused.value.hint == "sparkfleet image load ld (pulls the lost digest again: no layer moves)"
        report = load_image(inv, launch_recipe(inv, "ld"), archive, on_bytes=lambda _h, n: streamed.append(n))
        assert [h.action for h in report.hosts] == ["loaded"] and sum(streamed) == 0, report.hosts
        with monkeypatch.context() as mp:
            mp.setenv("DOCKER_HOST", dockerd.host)
            assert image_state(req)["present"] is True

        # the registry down (a wrong address in the push record): a new build streams over ssh
        other = tmp_path / "other.tar"
        other_id = docker_archive(b"\0" * 2048, other, "sparkfleet/other:build", "r2")
        from sparkfleet.images.record import push_record_path

        rec = json.loads(push_record_path("ld").read_text())
        rec.update(image_id=other_id, registry="127.0.0.1:9")
        push_record_path("ld").write_text(json.dumps(rec))
        events: list[str] = []
        report = load_image(inv, launch_recipe(inv, "ld"), stream_script(other, tmp_path / "result"),
                            on_event=events.append, on_bytes=lambda _h, n: streamed.append(n))  # fmt: skip
        assert [h.action for h in report.hosts] == ["loaded"], report.hosts
        assert any("streaming over ssh instead" in e for e in events) and sum(streamed) > 0
        assert read_record(hosts["dgx1"].root / "state", "ld")["repo_digest"] is None
    finally:
        dockerd.stop()
        podman_cleanup(pod_env, pod_base)
        shutil.rmtree(podman_trust, ignore_errors=True)
        for h in hosts.values():
            fleetnet.remove_host(h)


def test_bootstrap_trusts_the_fleet_ca_where_docker_and_podman_look(tmp_path):
    """bootstrap's fleet-CA changes: written under each engine's certs.d for the registry only;
    once there, nothing more to change."""
    from sparkfleet.ops.bootstrap import apply_change, trust_changes
    from sparkfleet.remote.hosts import LocalHost

    ca = reg_mod.make_ca(tmp_path / "ca").read_text()
    runner, prefix = LocalHost("spark"), str(tmp_path / "host")
    changes = trust_changes(runner, "10.0.0.1:5000", ca, prefix)
    assert [c.path for c in changes] == [f"{prefix}/etc/docker/certs.d/10.0.0.1:5000/ca.crt",
                                         f"{prefix}/etc/containers/certs.d/10.0.0.1:5000/ca.crt"]  # fmt: skip
    for c in changes:
        apply_change(runner, [], c)
    for c in changes:
        assert Path(c.path).read_text() == ca and oct(Path(c.path).stat().st_mode & 0o777) == "0o644"
    assert trust_changes(runner, "10.0.0.1:5000", ca, prefix) == []
    assert "BEGIN CERTIFICATE" in ca and not (tmp_path / "ca" / "ca.key").stat().st_mode & 0o077


def test_rollback_to_a_release_pulls_its_digest_and_runs_its_generation(
    registry, fleetnet, tmp_path, monkeypatch
):
    """A docker lane in a netns host: v1 launched, promoted and cut as r1; v2 pushed, loaded and
    launched; `rollback --to r1` pulls r1's digest and runs r1's generation on it again."""

    from click.testing import CliRunner

    from sparkfleet.cli import main as cli
    from sparkfleet.demo.hubfixture import build_nas_hub
    from sparkfleet.fleet import inventory
    from sparkfleet.images.load import load as load_image
    from sparkfleet.images.node import read_record
    from sparkfleet.images.push import push_lane
    from sparkfleet.lane.recipe import launch_recipe
    from sparkfleet.launch import generations
    from sparkfleet.launch import lane as lanes
    from support.lanefleet import MODELS, netns_fields, use_ssh, write_fleet

    if reason := engines_skip_reason("docker"):
        pytest.fail(reason)
    reg, _, _ = registry
    dockerd = Dockerd()
    host = None
    recipe = (
        """
[lane]
hosts = ["dgx1"]

[world]
tp = 1

[launch]
runtime = "docker"
image_build = "test-image"
port = 30000
served_model_name = "rel-test"
fabric = "none"
gpus = "none"
shm_size = "64m"
command = ["python3", "-m", "sparkfleet.demo.openai_server", "--host", "0.0.0.0", "--port", "{port}",
           "--served-model-name", "{served_model_name}", "--boot-delay", "0.3"]
[launch.timeouts]
ready_s = 90
poll_s = 0.3
stop_s = 5
"""
        + MODELS
    )
    try:
        host = fleetnet.add_host("dgx1", env={"DOCKER_HOST": dockerd.host}, share_mounts=True)
        dockerd.start(host.netns)
        use_ssh(monkeypatch, tmp_path / "ssh_config")
        monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "operator"))
        monkeypatch.setenv("SPARKFLEET_REGISTRY", reg.address)
        monkeypatch.setenv("SPARKFLEET_REGISTRY_CERTS", str(reg.cert_dir))
        monkeypatch.setenv("SPARKFLEET_REGISTRY_AUTH", str(reg.authfile))
        nas = build_nas_hub(tmp_path / "nas" / "hub", shard_bytes=16 * 1024)
        fields = {"dgx1": netns_fields(host, nas.root, ulimits={"memlock": 8192})}
        inv = inventory.load(write_fleet(tmp_path / "fleet", fields, {"rl": recipe}))
        layer = layer_tar(make_rootfs(tmp_path / "rootfs"))
        builds = {}
        for v in ("v1", "v2"):
            archive = tmp_path / f"{v}.tar"
            builds[v] = (docker_archive(layer, archive, f"sparkfleet/rl:{v}", v), archive)

        push_lane(inv, "rl", builds["v1"][1], reg)
        load_image(inv, launch_recipe(inv, "rl"), builds["v1"][1])
        first = lanes.launch(inv, "rl", canary=False, allow_nas_weights=True)
        assert first.ready.ok, first.ready
        gen = first.generation
        gen.update(good=True, promotion={"bench_report": "reports/rl.json", "gate": "baseline", "smoke": []})
        generations.save(inv.root, gen)
        runner = CliRunner()
        res = runner.invoke(cli, ["--root", str(inv.root), "release", "cut", "rl", "r1"])
        assert res.exit_code == 0, res.output
        lanes.stop(inv, "rl", 5)

        push_lane(inv, "rl", builds["v2"][1], reg)
        load_image(inv, launch_recipe(inv, "rl"), builds["v2"][1])
        assert lanes.launch(inv, "rl", canary=False, allow_nas_weights=True).ready.ok
        assert read_record(host.root / "state", "rl")["image_id"] == builds["v2"][0]

        res = runner.invoke(
            cli, ["--root", str(inv.root), "rollback", "rl", "--to", "r1", "--no-canary", "--json"]
        )
        assert res.exit_code == 0, res.output
        out = json.loads(res.output[res.output.index("{") :])
        assert out["rolled_back_to"] == gen["id"] and out["ok"]
        rec = read_record(host.root / "state", "rl")
        assert rec["image_id"] == builds["v1"][0] and rec["repo_digest"].endswith(
            json.loads((inv.root / "recipes" / "rl" / "releases" / "r1.json").read_text())["image"]["digest"]
        )
        running = lanes.status(inv, "rl").ranks[0]
        img = dockerd.docker("inspect", "--format", "{{.Image}}", running.name).stdout.strip()
        assert img == builds["v1"][0]
        newest = generations.load_all(inv.root, "rl")[-1]
        assert newest["rolled_back_to"] == gen["id"]  # the good generation it brought back

        # launch --release r1 after v2 was loaded again: r1's digest comes back, its recipe runs
        lanes.stop(inv, "rl", 5)
        load_image(inv, launch_recipe(inv, "rl"), builds["v2"][1])
        assert read_record(host.root / "state", "rl")["image_id"] == builds["v2"][0]
        res = runner.invoke(cli, ["--root", str(inv.root), "launch", "rl", "--release", "r1", "--no-canary",
                                          "--allow-nas-weights"])
        assert res.exit_code == 0, res.output
        assert read_record(host.root / "state", "rl")["image_id"] == builds["v1"][0]
        running = lanes.status(inv, "rl").ranks[0]
        assert (
            dockerd.docker("inspect", "--format", "{{.Image}}", running.name).stdout.strip()
            == builds["v1"][0]
        )
        doc = json.loads(runner.invoke(cli, ["--root", str(inv.root), "doctor", "rl", "--json"]).output)
        image = next(c for c in doc["checks"] if c["name"] == "image")
        r1 = json.loads((inv.root / "recipes" / "rl" / "releases" / "r1.json").read_text())["image"]["digest"]
        assert image["ok"] and f"pulled as {reg.address}/sparkfleet/rl@{r1}" in image["detail"], image
    finally:
        if host is not None:
            with contextlib.suppress(Exception):
                lanes.stop(inventory.load(tmp_path / "fleet"), "rl", 5)
        dockerd.stop()
        if host is not None:
            fleetnet.remove_host(host)
