"""The build's image ID, read from a docker-archive or a stream script without any engine."""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from pathlib import Path

import pytest

try:
    from support.engines import docker_archive, stream_script
except ImportError:  # tests/ imported as a package
    from tests.support.engines import docker_archive, stream_script

from launch_fleet import MODELS, write_fleet

from sparkfleet import inventory
from sparkfleet.errors import InventoryError
from sparkfleet.images.archive import ArchiveError, inspect_build
from sparkfleet.launch.recipe import launch_recipe


def _layer(tmp_path: Path) -> bytes:
    (tmp_path / "rootfs").mkdir()
    (tmp_path / "rootfs" / "hello").write_text("hi\n")
    out = tmp_path / "layer.tar"
    with tarfile.open(out, "w") as tar:
        tar.add(tmp_path / "rootfs" / "hello", arcname="hello")
    return out.read_bytes()


def test_image_id_is_the_config_digest_from_a_tar_and_from_a_stream_script(tmp_path):
    archive = tmp_path / "image.tar"
    want = docker_archive(_layer(tmp_path), archive, "sparkfleet-test/x:1", "one")
    with tarfile.open(archive) as tar:  # independently: the manifest's config blob, hashed
        manifest = json.load(tar.extractfile("manifest.json"))
        config = tar.extractfile(manifest[0]["Config"]).read()
    assert want == "sha256:" + hashlib.sha256(config).hexdigest()
    from_tar = inspect_build(archive)
    from_stream = inspect_build(stream_script(archive, tmp_path / "result"))
    assert (from_tar.kind, from_stream.kind) == ("archive", "stream")
    assert from_tar.image_id == from_stream.image_id == want
    assert from_stream.repo_tags == ("sparkfleet-test/x:1",)


def test_bad_sources_are_named(tmp_path):
    with pytest.raises(ArchiveError, match="no such file"):
        inspect_build(tmp_path / "result")
    (tmp_path / "notes.txt").write_text("not an image\n")
    with pytest.raises(ArchiveError, match="neither a docker-archive tar nor an executable stream script"):
        inspect_build(tmp_path / "notes.txt")
    failing = tmp_path / "broken-result"
    failing.write_text("#!/bin/sh\necho 'store path missing' >&2\nexit 3\n")
    failing.chmod(0o755)
    with pytest.raises(ArchiveError, match="store path missing"):
        inspect_build(failing)
    plain = tmp_path / "plain.tar"  # a tar, but not a docker-archive
    with tarfile.open(plain, "w") as tar:
        tar.add(failing, arcname="x")
    with pytest.raises(ArchiveError, match="no manifest.json"):
        inspect_build(plain)


LANE = """
[lane]
hosts = ["h1"]
[launch]
runtime = "docker"
command = ["serve"]
"""


def _fleet(tmp_path, launch_extra: str):
    fields = {"h1": {"address": "h1", "ssh_user": "u", "local_hub": "/l", "nas_hub": "/n"}}
    text = LANE.replace('runtime = "docker"', 'runtime = "docker"\n' + launch_extra) + MODELS
    return inventory.load(write_fleet(tmp_path / "fleet", fields, {"lane": text}))


def test_recipe_names_a_registry_image_or_a_build_not_both(tmp_path):
    inv = _fleet(tmp_path / "a", 'image_build = "mia-tp4-image"')
    assert launch_recipe(inv, "lane").image_build == "mia-tp4-image"
    with pytest.raises(InventoryError, match="launch.image and launch.image_build are both set"):
        launch_recipe(_fleet(tmp_path / "b", 'image_build = "x"\nimage = "lane-image"'), "lane")
    with pytest.raises(InventoryError, match="launch.image or launch.image_build is required"):
        launch_recipe(_fleet(tmp_path / "c", ""), "lane")


def test_an_engine_that_dies_mid_stream_is_an_error_not_a_hang(tmp_path):
    from sparkfleet.errors import SparkfleetError
    from sparkfleet.hosts import LocalHost
    from sparkfleet.images.archive import BuildImage
    from sparkfleet.images.load import stream_into

    big = tmp_path / "blob"
    big.write_bytes(os.urandom(8 << 20))  # far more than a pipe holds: the writer meets a closed pipe
    archive = tmp_path / "image.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(big, arcname="blob")
    build = BuildImage(str(archive), "archive", "sha256:" + "0" * 64, ())
    seen: list[int] = []
    with pytest.raises(SparkfleetError, match="local: false load failed"):
        stream_into(build, LocalHost("local"), "false", 60, seen.append)  # `false load` exits at once
    assert sum(seen) < archive.stat().st_size


def test_the_tp4_lane_needs_a_loaded_build_and_every_host_holding_it(tmp_path, monkeypatch):
    from sparkfleet.errors import ExitCode, SparkfleetError
    from sparkfleet.images.load import built_image_id
    from sparkfleet.launch.lane import check_built_image

    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    recipe = launch_recipe(inventory.load(Path(__file__).resolve().parents[2]), "dsv41-flash-4x-mia")
    assert recipe.image_build == "mia-tp4-image" and recipe.image is None  # not the bare base
    with pytest.raises(SparkfleetError) as err:
        built_image_id(recipe)
    assert err.value.exit_code == ExitCode.REFUSED
    assert err.value.hint == "nix build .#mia-tp4-image && sparkfleet image load dsv41-flash-4x-mia"

    built, other = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    check_built_image(recipe, built, {"dgx1": {"recorded": built, "present": True}})
    with pytest.raises(SparkfleetError) as err:
        check_built_image(recipe, built, {"dgx1": {"recorded": built, "present": True},
                                          "dgx2": {"recorded": other, "present": True},
                                          "dgx3": {"recorded": built, "present": False},
                                          "dgx4": {}})  # fmt: skip
    msg = err.value.message
    assert err.value.exit_code == ExitCode.REFUSED and "dgx1" not in msg
    assert f"dgx2: holds {other}" in msg and "dgx3: recorded" in msg
    assert "dgx4: holds no recorded image" in msg
