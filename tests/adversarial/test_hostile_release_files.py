"""The files `image push`, `release cut`, `rollback --to` and `launch --release` read, planted bad.

* the push login (`$SPARKFLEET_STATE_DIR/registry/push-auth.json`, or `--push-auth FILE`): not
  JSON, the wrong shape, a login that is not base64 or not sparkfleet's, two logins — each a clean
  usage error naming the file, never the password it holds;
* `image push`'s record (`$SPARKFLEET_STATE_DIR/registry/<lane>.json`), which `release cut` reads;
* a release record (`recipes/<lane>/releases/<NAME>.json`), which `rollback --to` reads: refused
  (exit 5) naming the file before any registry or host is asked.

Every case is bad by this test's own making; none needs a registry.
"""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from click.testing import CliRunner

from sparkfleet.base.errors import ExitCode
from sparkfleet.cli import main as cli
from sparkfleet.launch import generations as gens
from sparkfleet.launch import release
from support.engines import docker_archive
from support.lanefleet import MODELS, write_fleet

from .tally import bad_input

LANE = "lane"
SECRET = "hunter2-the-password"
RECIPE = '[lane]\nhosts = ["spark"]\n[world]\ntp = 1\n[launch]\nruntime = "process"\nport = 30997\n' \
         'fabric = "none"\ncommand = ["true"]\n' + MODELS  # fmt: skip


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    for env in ("SPARKFLEET_REGISTRY_CERTS", "SPARKFLEET_REGISTRY_AUTH", "SPARKFLEET_REGISTRY"):
        monkeypatch.delenv(env, raising=False)
    host = {"address": "127.0.0.1", "ssh_user": "root", "local_hub": str(tmp_path / "hub"),
            "nas_hub": str(tmp_path / "nas"), "state_dir": str(tmp_path / "s")}  # fmt: skip
    return write_fleet(tmp_path / "fleet", {"spark": host}, {LANE: RECIPE})


BAD_LOGINS = {
    "not-json": b"{auths",
    "a-list": b"[]",
    "auths-list": json.dumps({"auths": [SECRET]}).encode(),
    "entry-not-object": json.dumps({"auths": {"10.0.0.1:5001": SECRET}}).encode(),
    "not-base64": json.dumps({"auths": {"10.0.0.1:5001": {"auth": SECRET + "!"}}}).encode(),
    "not-ours": json.dumps({"auths": {"10.0.0.1:5001": {"auth": _b64(f"root:{SECRET}")}}}).encode(),
    "no-password": json.dumps({"auths": {"10.0.0.1:5001": {"auth": _b64("sparkfleet:")}}}).encode(),
    "two-logins": json.dumps({"auths": {a: {"auth": _b64(f"sparkfleet:{SECRET}")}
                                        for a in ("10.0.0.1:5001", "10.0.0.9:5001")}}).encode(),  # fmt: skip
    "deep": b'{"auths": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "not-utf8": b"\xff\xfe{}",
}


@pytest.mark.surface("cli:image push --push-auth", "file:registry push-auth.json")
@pytest.mark.parametrize("kind", list(BAD_LOGINS))
def test_a_bad_push_login_is_a_clean_error_that_never_shows_the_password(root, tmp_path, figures, kind):
    auth = tmp_path / "push-auth.json"
    auth.write_bytes(BAD_LOGINS[kind])
    archive = tmp_path / "a.tar"
    docker_archive(b"\0" * 1024, archive, "x/a:1", "a")
    res = CliRunner().invoke(cli, ["--root", str(root), "image", "push", LANE, "--image", str(archive),
                                   "--registry", "10.0.0.1:5000", "--push-auth", str(auth)])  # fmt: skip
    refused = res.exit_code == ExitCode.USAGE and str(auth) in res.output
    bad_input(figures, "registry-push-login", refused=refused)
    assert refused, (res.exit_code, res.output, res.exception)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert SECRET not in res.output and _b64(f"root:{SECRET}") not in res.output


@pytest.mark.surface("cli:image push --push-auth")
def test_no_push_login_says_where_it_comes_from(root, tmp_path, figures):
    archive = tmp_path / "a.tar"
    docker_archive(b"\0" * 1024, archive, "x/a:1", "a")
    res = CliRunner().invoke(cli, ["--root", str(root), "image", "push", LANE, "--image", str(archive),
                                   "--registry", "10.0.0.1:5000"])  # fmt: skip
    assert res.exit_code == ExitCode.USAGE and "no push login" in res.output, res.output
    assert "sparkfleet registry init --address HOST:PORT" in res.output


def _promoted(root) -> dict:
    recipe = (root / "recipes" / LANE / "recipe.toml").read_text()
    gen = {"id": gens.utc_id(1_700_000_000.0), "lane": LANE, "created_at": 1_700_000_000.0, "status": "ready",
           "good": True, "recipe_text": recipe, "recipe_sha256": hashlib.sha256(recipe.encode()).hexdigest(),
           "fleet_text": (root / "hosts" / "fleet.toml").read_text(),
           "image_ids": {"spark": "sha256:" + "a" * 64}}  # fmt: skip
    gens.save(root, gen)
    return gen


GOOD_PUSH = {"lane": LANE, "registry": "10.0.0.1:5000", "repo": f"sparkfleet/{LANE}",
             "digest": "sha256:" + "d" * 64, "image_id": "sha256:" + "a" * 64}  # fmt: skip
BAD_PUSH = {
    "not-json": b"{",
    "a-list": b"[1]",
    "no-digest": json.dumps({k: v for k, v in GOOD_PUSH.items() if k != "digest"}).encode(),
    "digest-short": json.dumps({**GOOD_PUSH, "digest": "sha256:abc"}).encode(),
    "image-id-int": json.dumps({**GOOD_PUSH, "image_id": 7}).encode(),
    "repo-list": json.dumps({**GOOD_PUSH, "repo": ["sparkfleet/lane"]}).encode(),
    "deep": b"[" * 100_000 + b"]" * 100_000,
}


@pytest.mark.surface("cli:release cut", "file:image push record")
@pytest.mark.parametrize("kind", list(BAD_PUSH))
def test_a_bad_push_record_is_refused_by_release_cut_naming_it(root, tmp_path, figures, kind):
    _promoted(root)
    rec = tmp_path / "state" / "registry" / f"{LANE}.json"
    rec.parent.mkdir(parents=True)
    rec.write_bytes(BAD_PUSH[kind])
    cut = ["--root", str(root), "release", "cut", LANE, "r1", "--registry", "10.0.0.1:5000"]
    res = CliRunner().invoke(cli, cut)
    refused = res.exit_code != 0 and str(rec) in res.output and "Traceback" not in res.output
    bad_input(figures, "image-push-record", refused=refused)
    assert refused, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert not release.releases_dir(root, LANE).exists()


def _release(root) -> dict:
    gen = _promoted(root)
    image = {"registry": "10.0.0.1:5000", "repo": f"sparkfleet/{LANE}", "digest": "sha256:" + "d" * 64,
             "image_id": "sha256:" + "a" * 64}  # fmt: skip
    return {"name": "r1", "lane": LANE, "cut_at": 1.0, "generation": gen["id"], "image": image,
            "recipe_text": gen["recipe_text"], "recipe_sha256": gen["recipe_sha256"],
            "fleet_text": gen["fleet_text"], "pins": None, "fingerprints": None, "reports": {}}  # fmt: skip


RELEASE_EDITS = {
    "not-json": lambda r: b"{",
    "a-list": lambda r: [r],
    "other-name": lambda r: {**r, "name": "r2"},
    "other-lane": lambda r: {**r, "lane": "other"},
    "generation-path": lambda r: {**r, "generation": "../../x"},
    "recipe-edited": lambda r: {**r, "recipe_text": r["recipe_text"] + "# edited\n"},
    "no-image": lambda r: {k: v for k, v in r.items() if k != "image"},
    "digest-not-sha256": lambda r: {**r, "image": {**r["image"], "digest": "sha256:zz"}},
    "image-id-not-sha256": lambda r: {**r, "image": {**r["image"], "image_id": "latest"}},
    "registry-not-host-port": lambda r: {**r, "image": {**r["image"], "registry": "evil registry"}},
    "another-lanes-repo": lambda r: {**r, "image": {**r["image"], "repo": "sparkfleet/other"}},
    "fleet-text-int": lambda r: {**r, "fleet_text": 3},
}


@pytest.mark.surface("cli:rollback --to", "cli:launch --release", "file:release record")
@pytest.mark.parametrize("kind", list(RELEASE_EDITS))
def test_a_bad_release_record_is_refused_before_anything_is_asked(root, figures, kind):
    edited = RELEASE_EDITS[kind](_release(root))
    path = release.releases_dir(root, LANE) / "r1.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(edited if isinstance(edited, bytes) else json.dumps(edited).encode())
    res = CliRunner().invoke(cli, ["--root", str(root), "rollback", LANE, "--to", "r1", "--no-canary"])
    refused = res.exit_code == ExitCode.REFUSED and str(path) in res.output and "Traceback" not in res.output
    bad_input(figures, "release-record", refused=refused)
    assert refused, (res.exit_code, res.output)
    assert "could not be verified" not in res.output  # refused on the file alone: no registry was asked
