"""Hostile image archives, kit locks, bootstrap's write paths and report figures, each judged here.

* image-archive: a good docker-archive mutated (tags of the wrong type, `..` or absolute member
  names, manifests of the wrong shape, a missing config, deep nesting, duplicates) must be an
  ArchiveError — never another exception; benign changes (`./` names, extra layers, extra small
  JSON) must still give the config's ID.
* pin-lock: any JSON value at any key of the kit's lock; a value of the wrong type must be a
  PinError with fleet.toml unchanged, a right one must import.
* bootstrap-links: links planted at the old fixed temp names and at the final paths of every
  file bootstrap writes; a temp-name link is never followed (the victim's bytes are compared
  after every run: lost bytes), a final-path link is refused.
* report-html: any JSON value as a report's decode tok/s; a value that is not a finite number
  is shown as "—" and the page still renders, a finite one is shown.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import shutil
import tarfile
import textwrap

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkfleet import pins
from sparkfleet.bench.report.html import write_page
from sparkfleet.fleet import inventory
from sparkfleet.images.archive import ArchiveError, inspect_build
from sparkfleet.ops import bootstrap as bs
from sparkfleet.remote.hosts import LocalHost

from .tally import bad_input, count, lost_bytes

# ---- image-archive --------------------------------------------------------------------------------

CONFIG = json.dumps({"architecture": "arm64", "os": "linux", "rootfs": {"type": "layers"}}).encode()
CONFIG_NAME = hashlib.sha256(CONFIG).hexdigest() + ".json"
LAYER = b"\0" * 1024
BAD_ARCHIVE = ["tags-string", "tags-not-str", "dotdot-member", "absolute-member", "manifest-type",
               "config-type", "config-missing", "deep", "duplicate-manifest", "not-utf8"]  # fmt: skip
BENIGN_ARCHIVE = ["dot-slash", "extra-layer", "extra-json", "tags-null"]


def _archive(mutations: set[str], text: str) -> tuple[list[tuple[str, bytes]], list | None]:
    """Members of a docker-archive with `mutations` applied; and the tags a reader must report."""
    entry: dict = {"Config": CONFIG_NAME, "RepoTags": ["fleet/x:1"], "Layers": ["l/layer.tar"]}
    members = [("l/layer.tar", LAYER), (CONFIG_NAME, CONFIG)]
    tags: list | None = ["fleet/x:1"]
    if "tags-null" in mutations:  # benign, so first: a bad mutation of the same key overrides it
        entry["RepoTags"], tags = None, []
    if "tags-string" in mutations:
        entry["RepoTags"] = text or "evil"
    if "tags-not-str" in mutations:
        entry["RepoTags"] = [len(text)]
    if "config-type" in mutations:
        entry["Config"] = [CONFIG_NAME]
    if "config-missing" in mutations:
        members = members[:1]
    if "dotdot-member" in mutations:
        members.append(("../" * (1 + len(text) % 3) + "cfg.json", CONFIG))
    if "absolute-member" in mutations:
        members.append(("/" + (text.strip("/") or "x") + ".json", b"{}"))
    if "extra-layer" in mutations:
        members.append(("m/layer.tar", LAYER))
    if "extra-json" in mutations:
        members.append(("m/extra.json", json.dumps({"t": text}).encode()))
    manifest = json.dumps([entry]).encode()
    if "manifest-type" in mutations:
        manifest = [b"42", b"{}", b"[]", b'["x"]', b"true", b"null"][len(text) % 6]
    if "deep" in mutations:
        manifest = b"[" * 100_000 + b"]" * 100_000
    if "not-utf8" in mutations:
        manifest = b"\xff" + manifest
    members.append(("manifest.json", manifest))
    if "duplicate-manifest" in mutations:
        members.append(("./manifest.json", manifest))
    if "dot-slash" in mutations:
        members = [(n if n.startswith(("/", ".")) else "./" + n, d) for n, d in members]
    return members, tags


def _flaws(members: list[tuple[str, bytes]]) -> set[str]:
    """The BAD_ARCHIVE kinds this archive shows, read from its members by this test alone.

    Why an oracle apart from the mutations: mutations of one key override each other, so a case
    counted as bad must be seen to be bad in the bytes it is made of, not in what was asked for.
    """
    found: set[str] = set()
    names = [name for name, _ in members]
    plain = [name.removeprefix("./") for name in names]
    if any(name.startswith("/") for name in names):
        found.add("absolute-member")
    if any(".." in name.split("/") for name in names):
        found.add("dotdot-member")
    if plain.count("manifest.json") > 1:
        found.add("duplicate-manifest")
    raw = [data for name, data in zip(plain, (d for _, d in members), strict=True) if name == "manifest.json"]
    try:
        doc = json.loads(raw[-1].decode("utf-8"))
    except UnicodeDecodeError:
        return found | {"not-utf8"}
    except RecursionError:
        return found | {"deep"}
    if not (isinstance(doc, list) and len(doc) == 1 and isinstance(doc[0], dict)):
        return found | {"manifest-type"}
    tags, config = doc[0].get("RepoTags"), doc[0].get("Config")
    if isinstance(tags, str):
        found.add("tags-string")
    elif isinstance(tags, list) and not all(isinstance(t, str) for t in tags):
        found.add("tags-not-str")
    if not isinstance(config, str):
        found.add("config-type")
    elif config not in plain:
        found.add("config-missing")
    return found


@pytest.mark.surface("file:image archive", "cli:image load --image", "cli:image push --image")
@pytest.mark.parametrize("bad", BAD_ARCHIVE)
def test_every_bad_archive_mutation_stays_bad_beside_every_benign_one(bad):
    """A benign mutation never undoes a bad one (`tags-null` once replaced `tags-string`'s value, so
    a case counted as bad was a good archive)."""
    for benign in [None, *BENIGN_ARCHIVE]:
        for text in ("", "x", "abc"):
            members, _ = _archive({bad} | ({benign} if benign else set()), text)
            assert bad in _flaws(members), (bad, benign, text)
    members, _ = _archive(set(BENIGN_ARCHIVE), "x")
    assert _flaws(members) == set()  # and the oracle sees no flaw in a benign archive


@pytest.mark.surface("file:image archive", "cli:image load --image", "cli:image push --image")
@given(
    bad=st.sets(st.sampled_from(BAD_ARCHIVE), max_size=2),
    benign=st.sets(st.sampled_from(BENIGN_ARCHIVE), max_size=2),
    text=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=8),
)
def test_hostile_archives_are_archive_errors(tmp_path_factory, figures, bad, benign, text):
    members, tags = _archive(bad | benign, text)
    path = tmp_path_factory.mktemp("archive") / "image.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    count(figures, "image-archive", "archives_tried")
    flaws = _flaws(members)
    assert bool(flaws) == bool(bad), f"asked for {sorted(bad | benign)}, built an archive with {flaws}"
    try:
        build = inspect_build(path)  # anything but ArchiveError escapes and fails the test
    except ArchiveError:
        build = None
    if flaws:  # the archive's own bytes, read by this test's oracle, say it is bad
        bad_input(figures, "image-archive", refused=build is None)
        assert build is None, f"{sorted(bad)} accepted: {build}"
    else:
        assert build is not None, f"benign {sorted(benign)} refused"
        assert build.image_id == "sha256:" + CONFIG_NAME.removesuffix(".json")
        assert list(build.repo_tags) == tags
        count(figures, "image-archive", "benign_archives_read")


# ---- pin-lock ---------------------------------------------------------------------------------------

KIT = "0123abc" + "d" * 33
MODEL = "5" * 40
DIGEST = "sha256:" + "3" * 64
FLEET = """\
    schema_version = 1
    [defaults]
    ssh_user = "ops"
    local_hub = "/srv/hub"
    nas_hub = "/mnt/nas/hub"
    [hosts.a]
    address = "a"
    [pins.weights]
    kind = "hf"
    repo = "kit-org/Model"
    revision = "main"
    [pins.kit]
    kind = "git"
    repo = "kit-org/kit"
    rev = "0123abc"
    [pins.kit-image]
    kind = "oci"
    image = "ghcr.io/kit-org/runtime"
    digest = "sha256:3333"
"""


def _good_lock() -> dict:
    return {
        "format": "ds41_public_recipe_lock_v2",
        "model": {"repo": "kit-org/Model", "revision": MODEL, "manifest_sha256": "6" * 64},
        "runtime": {
            "image": f"ghcr.io/kit-org/runtime@{DIGEST}",
            "files": {"k.tar": {"bytes": 10, "sha256": "7" * 64}},
        },
    }


def _right_type(path: tuple[str, ...], value) -> bool:
    """The lock's schema, written here: what each key must hold for the import to make sense."""
    is_int = isinstance(value, int) and not isinstance(value, bool)
    return {
        ("runtime",): value is None
        or (isinstance(value, dict) and "image" not in value and "files" not in value),
        ("runtime", "files"): value is None or (isinstance(value, dict) and not value),
        ("runtime", "files", "k.tar"): False,  # a random value never has both sha256 and bytes
        ("runtime", "files", "k.tar", "sha256"): isinstance(value, str),
        ("runtime", "files", "k.tar", "bytes"): is_int,
        ("runtime", "image"): isinstance(value, str) and value == f"ghcr.io/kit-org/runtime@{DIGEST}",
        ("model", "repo"): isinstance(value, str),
        ("model", "revision"): isinstance(value, str)
        and len(value) == 40
        and set(value) <= set("0123456789abcdef"),
    }[path]


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=4,
)  # fmt: skip
LOCK_KEYS = [("runtime",), ("runtime", "files"), ("runtime", "files", "k.tar"),
             ("runtime", "files", "k.tar", "sha256"), ("runtime", "files", "k.tar", "bytes"),
             ("runtime", "image"), ("model", "repo"), ("model", "revision")]  # fmt: skip


@pytest.mark.surface("file:kit recipe-lock.json", "cli:pins import-lock")
@given(key=st.sampled_from(LOCK_KEYS), value=JSON_VALUES)
def test_any_value_at_any_lock_key_is_a_pin_error_or_imports(tmp_path_factory, figures, key, value):
    root = tmp_path_factory.mktemp("pins")
    (root / "hosts").mkdir()
    fleet = root / "hosts" / "fleet.toml"
    fleet.write_text(textwrap.dedent(FLEET))
    before = fleet.read_text()
    doc = _good_lock()
    node = doc
    for k in key[:-1]:
        node = node[k]
    node[key[-1]] = value
    lock = root / "lock.json"
    lock.write_text(json.dumps(doc))
    count(figures, "pin-lock", "locks_tried")
    try:
        pins.import_lock(inventory.load(root), lock, from_pin="kit", at=KIT)
        refused = None
    except pins.PinError as exc:  # anything else escapes and fails the test
        refused = exc
    if not _right_type(key, value):
        bad_input(figures, "pin-lock", refused=refused is not None)
        assert refused is not None, f"{'.'.join(key)} = {value!r} was imported"
        assert ".".join(key[:2]) in refused.message or "runtime" in refused.message, refused.message
        assert fleet.read_text() == before  # nothing written
    elif refused is not None:
        count(figures, "pin-lock", "refused_without_a_known_reason")


# ---- bootstrap-links --------------------------------------------------------------------------------

PLANTS = ["temp-to-file", "temp-to-missing", "temp-to-dir", "final-to-file"]
WRITES = ["sudoers", "nix.conf", "nix-link"]


@pytest.mark.surface("cli:bootstrap")
@pytest.mark.parametrize("what", WRITES)
@pytest.mark.parametrize("plant", PLANTS)
def test_links_planted_where_bootstrap_writes(tmp_path, figures, what, plant):
    if shutil.which("visudo") is None:
        pytest.skip("visudo not found (Debian package sudo)")
    victim = tmp_path / "victim"
    victim.write_bytes(b"the victim's own bytes\n")
    victim.chmod(0o600)
    (tmp_path / "victim-dir").mkdir()
    final = tmp_path / {"sudoers": "etc/sudoers.d/sparkfleet-nix", "nix.conf": "etc/nix/nix.conf",
                        "nix-link": "usr/local/bin/nix-store"}[what]  # fmt: skip
    final.parent.mkdir(parents=True)
    change = {
        "sudoers": bs.Change("sudo-path", "s", str(final), None, bs.sudoers_text(), "0440",
                             validate=("visudo", "-c", "-f")),
        "nix.conf": bs.Change("trusted-users", "t", str(final), None, "trusted-users = root u\n", "0644"),
        "nix-link": bs.Change("nix-path", "l", str(final), link_target="/nix/profile/bin/nix"),
    }[what]  # fmt: skip
    to = {"file": victim, "missing": tmp_path / "nothing", "dir": tmp_path / "victim-dir"}[
        plant.split("-")[-1]
    ]
    planted = final if plant.startswith("final") else final.parent / f".{final.name}.sparkfleet-tmp"
    planted.symlink_to(to)
    count(figures, "bootstrap-links", "links_planted")
    try:
        bs.apply_change(LocalHost("local"), [], change)
        refused = False
    except bs.BootstrapError:
        refused = True
    victims = {"victim": victim.read_bytes(), "victim-mode": oct(victim.stat().st_mode & 0o777).encode()}
    lost = lost_bytes(
        figures, "bootstrap-links", {"victim": b"the victim's own bytes\n", "victim-mode": b"0o600"}, victims
    )
    assert lost == 0 and not (tmp_path / "nothing").exists() and not list((tmp_path / "victim-dir").iterdir())
    if plant.startswith("final") and what != "nix-link":  # a link where a file belongs: known bad
        bad_input(figures, "bootstrap-links", refused=refused)
        assert refused and os.readlink(final) == str(victim)
    else:
        assert not refused
        assert final.is_symlink() == (what == "nix-link")
        count(
            figures,
            "bootstrap-links",
            "temp_links_not_followed" if plant.startswith("temp") else "links_replaced",
        )
    assert not [p for p in final.parent.iterdir() if p.name.startswith(f".{final.name}.sparkfleet-tmp.")]


# ---- report-html ------------------------------------------------------------------------------------

DECODE = (
    st.floats()  # NaN and ±Infinity included
    | st.integers(-(10**6), 10**6)
    | st.text(max_size=4)
    | st.booleans()
    | st.none()
    | st.builds(lambda m, c: {"mean": m, "ci95": c}, st.floats(), st.floats())
)


def _report(when: str, decode) -> dict:
    return {
        "schema": "sparkfleet.bench/1", "status": "ok", "failures": [], "tag": "bench",
        "created_utc": f"2026-09-{when}Z", "lane": "lane-x", "settings": {},
        "decode_probe": {"metrics": {"decode_tps": decode}},
    }  # fmt: skip


def _finite(value) -> bool:
    if isinstance(value, dict):
        value = value.get("mean")
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@pytest.mark.surface("file:bench report", "cli:report html")
@given(decode=DECODE)
def test_any_decode_figure_renders_and_a_non_finite_one_is_a_dash(tmp_path_factory, figures, decode):
    folder = tmp_path_factory.mktemp("reports")
    (folder / "2026-09-27_053009_bench.json").write_text(json.dumps(_report("27T05:30:09", 35.0)))
    odd = "2026-09-28_053009_bench"
    (folder / f"{odd}.json").write_text(json.dumps(_report("28T05:30:09", decode)))
    count(figures, "report-html", "reports_tried")
    page = write_page("lane-x", folder, None, folder / "page.html")  # a traceback fails the test
    text = page.path.read_text()
    row = text[text.index(f'" data-run="{odd}"><td') :]
    decode_cell = row[: row.index("</tr>")].split("<td")[4]
    if not _finite(decode):  # not a finite number, by the oracle above
        bad_input(figures, "report-html", refused=decode_cell == ">—</td>")
        assert decode_cell == ">—</td>", (decode, decode_cell)
    else:
        assert decode_cell != ">—</td>", (decode, decode_cell)
        count(figures, "report-html", "finite_figures_shown")
    assert "NaN" not in text and ">inf<" not in text.lower() and '"-inf"' not in text
