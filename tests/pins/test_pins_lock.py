"""`sparkfleet pins import-lock`: the EXL3 kit's recipe-lock.json into the fleet's pins.

The lock here is written for these tests in the kit's format (ds41_public_recipe_lock_v2: model
and draft as {repo, revision, manifest_sha256}, runtime.image as image@digest, runtime files
with sha256 and bytes); its values are made up.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkfleet import pins
from sparkfleet.cli import main
from sparkfleet.fleet import inventory

KIT = "0123abc" + "d" * 33
MODEL, DRAFT = "5" * 40, "f" * 40
DIGEST = "sha256:" + "3" * 64
FLEET = """\
    schema_version = 1
    [defaults]
    ssh_user = "ops"
    local_hub = "/srv/hub"
    nas_hub = "/mnt/nas/hub"
    [hosts.a]
    address = "a"

    [pins.weights]   # the 3bpw weights
    kind = "hf"
    repo = "kit-org/Model-EXL3-3bpw"
    revision = "main"
    note = "commit not recorded in the log"

    [pins.drafter]
    kind = "hf"
    repo = "kit-org/Drafter-EXL3"
    revision = "main"

    [pins.kit]
    kind = "git"
    repo = "kit-org/kit"
    rev = "0123abc"   # as the log gives it

    [pins.kit-image]
    kind = "oci"
    image = "ghcr.io/kit-org/runtime"
    digest = "sha256:3333"
"""


def lock(**over) -> dict:
    doc = {
        "draft": {"manifest_sha256": "c" * 64, "repo": "kit-org/Drafter-EXL3", "revision": DRAFT},
        "format": "ds41_public_recipe_lock_v2",
        "kit_manifest_sha256": "e" * 64,
        "model": {"manifest_sha256": "6" * 64, "repo": "kit-org/Model-EXL3-3bpw", "revision": MODEL},
        "runtime": {
            "cache_manifest_sha256": "9" * 64,
            "files": {"kernel-cache.tar": {"bytes": 683673600, "sha256": "7" * 64}},
            "image": f"ghcr.io/kit-org/runtime@{DIGEST}",
            "transport": "ghcr",
        },
    }
    doc.update(over)
    return doc


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "hosts").mkdir()
    (tmp_path / "hosts" / "fleet.toml").write_text(textwrap.dedent(FLEET))
    return tmp_path


def write_lock(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc, indent=2))
    return path


def test_import_lock_leaves_no_pin_on_main(root: Path, tmp_path: Path) -> None:
    path = write_lock(tmp_path / "recipe-lock.json", lock())
    fleet = root / "hosts" / "fleet.toml"
    before = fleet.read_text()
    dry = pins.import_lock(inventory.load(root), path, from_pin="kit", at=KIT, dry_run=True)
    assert set(dry.updated) == {"weights", "drafter", "kit", "kit-image"} and not dry.written
    assert fleet.read_text() == before

    report = pins.import_lock(inventory.load(root), path, from_pin="kit", at=KIT)
    assert report.written
    inv = inventory.load(root)
    assert inv.pins["weights"].value == MODEL and inv.pins["drafter"].value == DRAFT
    assert inv.pins["kit"].value == KIT and inv.pins["kit-image"].value == DIGEST
    assert all(p.resolved for p in inv.pins.values())
    assert inv.pins["weights"].note == f"model of kit-org/kit recipe-lock.json at {KIT}"
    text = fleet.read_text()
    assert (
        "[pins.weights]   # the 3bpw weights" in text
        and 'rev = "' + KIT + '"   # as the log gives it' in text
    )
    files = f"runtime.files.kernel-cache.tar: sha256 {'7' * 64} (683673600 bytes), no URL in the lock"
    assert report.not_imported == (files,)

    again = pins.import_lock(inventory.load(root), path, from_pin="kit", at=KIT)
    assert not again.updated and not again.written
    assert set(again.unchanged) == {"weights", "drafter", "kit-image"}


@pytest.mark.parametrize(
    "doc,at,message",
    [
        (lock(format="something_else"), KIT, "format: 'something_else' is not one of"),
        (lock(model={"repo": "kit-org/Model-EXL3-3bpw", "revision": "main"}), KIT,
         "model.revision: expected a full 40-hex commit, got 'main'"),
        (lock(runtime={"image": "ghcr.io/kit-org/runtime:latest"}), KIT,
         "runtime.image: expected image@sha256"),
        (lock(runtime={"image": "ghcr.io/kit-org/runtime@sha256:" + "4" * 64}), KIT,
         "pin kit-image records sha256:3333, but"),
        (lock(), "9999" + "0" * 36, "is not a full commit extending pin kit (0123abc)"),
    ],
)  # fmt: skip
def test_bad_or_disagreeing_locks_change_nothing(root: Path, tmp_path: Path, doc, at, message) -> None:
    fleet = root / "hosts" / "fleet.toml"
    before = fleet.read_text()
    with pytest.raises(pins.PinError, match=message.replace("(", r"\(").replace(")", r"\)")):
        pins.import_lock(inventory.load(root), write_lock(tmp_path / "lock.json", doc), from_pin="kit", at=at)
    assert fleet.read_text() == before


def test_cli_import_lock(root: Path, tmp_path: Path) -> None:
    path = write_lock(tmp_path / "recipe-lock.json", lock())
    res = CliRunner().invoke(
        main, ["--root", str(root), "pins", "import-lock", str(path), "--from", "kit", "--json"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["updated"]["weights"]["revision"] == MODEL
    bad = CliRunner().invoke(main, ["--root", str(root), "pins", "import-lock", str(tmp_path / "nope.json"),
                                    "--from", "kit"])  # fmt: skip
    assert bad.exit_code != 0 and "nope.json: no such file" in bad.output


FILES_OK = {"kernel-cache.tar": {"bytes": 683673600, "sha256": "7" * 64}}
IMAGE_OK = f"ghcr.io/kit-org/runtime@{DIGEST}"


@pytest.mark.parametrize(
    "doc,key",
    [
        (lock(runtime="ghcr.io/kit-org/runtime"), "runtime"),
        (lock(runtime=["image"]), "runtime"),
        (lock(runtime=7), "runtime"),
        (lock(runtime={"image": IMAGE_OK, "files": ["kernel-cache.tar"]}), "runtime.files"),
        (lock(runtime={"image": IMAGE_OK, "files": "kernel-cache.tar"}), "runtime.files"),
        (lock(runtime={"image": IMAGE_OK, "files": {"kc.tar": 5}}), "runtime.files.kc.tar"),
        (lock(runtime={"image": IMAGE_OK, "files": {"k": {"bytes": "big", "sha256": "7" * 64}}}),
         "runtime.files.k.bytes"),
        (lock(runtime={"image": IMAGE_OK, "files": {"k": {"bytes": 1, "sha256": ["7"]}}}),
         "runtime.files.k.sha256"),
        (lock(runtime={"image": IMAGE_OK, "files": {"k": {"bytes": True, "sha256": "7" * 64}}}),
         "runtime.files.k.bytes"),
        (lock(runtime={"image": 12}), "runtime.image"),
        (lock(model={"repo": ["kit-org/Model-EXL3-3bpw"], "revision": MODEL}), "model.repo"),
    ],
)  # fmt: skip
def test_a_lock_with_wrong_json_types_is_a_pin_error_naming_the_key(root, tmp_path, doc, key):
    """Issue 20 item 15: `runtime` or `files` of the wrong JSON type gave tracebacks."""
    fleet = root / "hosts" / "fleet.toml"
    before = fleet.read_text()
    path = write_lock(tmp_path / "lock.json", doc)
    with pytest.raises(pins.PinError, match=f": {key}: expected"):
        pins.import_lock(inventory.load(root), path, from_pin="kit", at=KIT)
    res = CliRunner().invoke(main, ["--root", str(root), "pins", "import-lock", str(path), "--from", "kit"])
    assert res.exit_code != 0 and f"{key}: expected" in res.output and "Traceback" not in res.output
    assert not isinstance(res.exception, TypeError | AttributeError | KeyError)
    assert fleet.read_text() == before


def test_a_deeply_nested_lock_is_a_pin_error(root, tmp_path):
    path = tmp_path / "lock.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(pins.PinError, match="not valid JSON"):
        pins.import_lock(inventory.load(root), path, from_pin="kit", at=KIT)
