"""The build's image ID, read from a docker-archive or a stream script without any engine."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

try:
    from support.engines import docker_archive, stream_script
except ImportError:  # tests/ imported as a package
    from tests.support.engines import docker_archive, stream_script

from sparkfleet.base.errors import InventoryError
from sparkfleet.fleet import inventory
from sparkfleet.images.archive import ArchiveError, inspect_build
from sparkfleet.lane.recipe import launch_recipe
from support.lanefleet import MODELS, write_fleet


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
    from sparkfleet.base.errors import SparkfleetError
    from sparkfleet.images.archive import BuildImage
    from sparkfleet.images.load import stream_into
    from sparkfleet.remote.hosts import LocalHost

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
    from sparkfleet.base.errors import ExitCode, SparkfleetError
    from sparkfleet.images.record import built_image_id
    from sparkfleet.launch.plan import check_built_image

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


def test_launch_names_host_lane_lost_repo_digest_and_the_fix():
    """A host whose engine lost the recorded RepoDigest (kept the ID): launch says which host, which
    lane, which digest, and the command that pulls it again by digest (no layer moves), as doctor does."""
    from sparkfleet.base.errors import ExitCode, SparkfleetError
    from sparkfleet.launch.plan import check_built_image
    from sparkfleet.ops.doctor import built_image_check

    recipe = launch_recipe(inventory.load(Path(__file__).resolve().parents[2]), "dsv41-flash-4x-mia")
    built = "sha256:" + "1" * 64
    ref = "10.0.0.9:5000/sparkfleet/dsv41-flash-4x-mia@sha256:" + "7" * 64
    lost = {"record": {"image_id": built, "repo_digest": ref}, "recorded": built,
            "present": False, "repo_digest_present": False}  # fmt: skip
    held = {"recorded": built, "present": True}
    with pytest.raises(SparkfleetError) as err:
        check_built_image(recipe, built, {"dgx1": held, "dgx3": lost})
    msg, hint = err.value.message, err.value.hint
    assert err.value.exit_code == ExitCode.REFUSED and "dgx1" not in msg
    assert msg.startswith("lane dsv41-flash-4x-mia: ")
    assert f"dgx3: holds {built} but no longer its RepoDigest {ref}" in msg
    assert "engine no longer has it" not in msg  # it has the image: what it lost is the digest
    assert hint == "sparkfleet image load dsv41-flash-4x-mia (pulls the lost digest again: no layer moves)"
    with pytest.raises(SparkfleetError) as err:  # a [gateway] replica's launch names its own copy
        check_built_image(recipe, built, {"dgx3": lost}, " --replica 1")
    assert err.value.hint.startswith("sparkfleet image load dsv41-flash-4x-mia --replica 1 (pulls")
    check = built_image_check("dgx3", recipe, built, None, lost)  # doctor says the same facts
    assert not check.ok and f"holds {built} but no longer its RepoDigest {ref}" in check.detail
    assert check.hint == hint


# ---- hostile archives ---------------------------------------------------------------------------

CONFIG = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers"}}).encode()
CONFIG_NAME = hashlib.sha256(CONFIG).hexdigest() + ".json"


def _manifest(**entry) -> bytes:
    return json.dumps([{"Config": CONFIG_NAME, "RepoTags": ["x:1"], "Layers": [], **entry}]).encode()


def hostile_archive(out: Path, members: list[tuple[str, bytes]]) -> Path:
    """A tar with exactly these members, in this order (names as given: `..`, `/`, `./`)."""
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


HOSTILE_ARCHIVES = {
    "tags-a-string": ([(CONFIG_NAME, CONFIG), ("manifest.json", _manifest(RepoTags="evil"))], "RepoTags"),
    "tags-not-strings": ([(CONFIG_NAME, CONFIG), ("manifest.json", _manifest(RepoTags=[1]))], "RepoTags"),
    "traversal-config": (
        [("../../cfg.json", CONFIG), ("manifest.json", _manifest(Config="cfg.json"))],
        "'../../cfg.json': a path outside the archive",
    ),
    "traversal-named": (
        [(CONFIG_NAME, CONFIG), ("manifest.json", _manifest(Config="../" + CONFIG_NAME))],
        "a path outside the archive",
    ),
    "absolute-member": ([("/etc/cfg.json", CONFIG), ("manifest.json", _manifest())], "outside the archive"),
    "manifest-a-number": ([("manifest.json", b"42")], "manifest.json: expected a list"),
    "manifest-an-object": ([("manifest.json", b"{}")], "manifest.json: expected a list"),
    "manifest-empty": ([("manifest.json", b"[]")], "manifest.json: expected a list"),
    "entry-a-list": ([("manifest.json", b'[["Config"]]')], "manifest.json: expected a list"),
    "config-a-number": ([("manifest.json", _manifest(Config=5))], r"\[0\].Config: expected a member name"),
    "config-a-list": ([("manifest.json", _manifest(Config=["a"]))], r"\[0\].Config"),
    "config-missing": ([("manifest.json", _manifest())], "names config .* which is not a JSON member"),
    "deeply-nested": ([("manifest.json", b"[" * 100_000 + b"]" * 100_000)], "nested too deeply"),
    "not-utf8": ([("manifest.json", b"\xff\xfe[]")], "manifest.json: not valid JSON"),
    "manifest-twice": (
        [(CONFIG_NAME, CONFIG), ("manifest.json", _manifest()), ("./manifest.json", _manifest(Layers=[]))],
        "manifest.json appears twice",
    ),
    # five 4 MiB JSON members: each under the per-member cap, together over the total cap
    "json-flood": (
        [(f"pad{i}.json", b" " * (4 * 1024 * 1024)) for i in range(5)] + [("manifest.json", _manifest())],
        "pad4.json: the JSON members add up to more than 16 MiB",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_ARCHIVES))
def test_a_hostile_archive_is_a_clean_archive_error_naming_the_member(tmp_path, case):
    members, message = HOSTILE_ARCHIVES[case]
    archive = hostile_archive(tmp_path / "image.tar", members)
    with pytest.raises(ArchiveError, match=message):
        inspect_build(archive)
    # the same through a stream script (`nix build`'s ./result): the reader stops early, cleanly
    with pytest.raises(ArchiveError, match=message):
        inspect_build(stream_script(archive, tmp_path / "result"))


def test_a_well_formed_archive_with_dot_slash_names_still_reads(tmp_path):
    archive = hostile_archive(
        tmp_path / "image.tar", [("./" + CONFIG_NAME, CONFIG), ("./manifest.json", _manifest(RepoTags=None))]
    )
    build = inspect_build(archive)
    assert build.image_id == "sha256:" + CONFIG_NAME.removesuffix(".json") and build.repo_tags == ()


@pytest.mark.parametrize(
    "doc,key",
    [({"build": ["sha256:x"]}, "build"), ({"build": {"image_id": 5}}, "build.image_id"),
     ({"hosts": [["dgx1", {}]]}, "hosts"), ({"previous_build": "x"}, "previous_build")],
)  # fmt: skip
def test_a_tampered_operator_record_is_an_error_naming_the_key(tmp_path, monkeypatch, doc, key):
    from sparkfleet.base.errors import SparkfleetError
    from sparkfleet.images.record import built_image_id, operator_record_path

    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    recipe = launch_recipe(inventory.load(Path(__file__).resolve().parents[2]), "dsv41-flash-4x-mia")
    path = operator_record_path(recipe.lane)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    with pytest.raises(SparkfleetError, match=f"{key}: expected"):
        built_image_id(recipe)
    path.write_text("[" * 100_000)
    with pytest.raises(SparkfleetError, match="nested too deeply"):
        built_image_id(recipe)
