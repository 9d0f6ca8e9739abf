"""`sparkfleet pins import-manifest` and the comment-preserving fleet.toml edits under it."""

from __future__ import annotations

import json
import textwrap
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkfleet import pins
from sparkfleet.cli import main
from sparkfleet.fleet import edit as fleetedit
from sparkfleet.fleet import inventory

FLEET = """\
    # Fleet under test: every comment here must survive.
    schema_version = 1
    [defaults]
    ssh_user = "ops"
    local_hub = "/srv/hub"
    nas_hub = "/mnt/nas/hub"
    [hosts.a]
    address = "a"

    [pins.mia-tp4]  # the TP4 production line
    kind = "git"
    repo = "MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks"
    rev = "cad252b7d3"   # prefix from the night-shift log
    note = "vendored"
"""

# Written for these tests in the documented format (component, source commit, sha256, url).
MANIFEST = """\
    # component     source-commit   sha256-of-download   url
    roce-nante  1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b  {a}  https://example.org/roce/archive/1a2b3c4d.tar.gz
    b12x        99aa88bb  {b}  https://example.org/b12x/b12x-99aa88bb.tar.gz   # MoE kernels
    local       adapters/tp3_pad.py  {c}  -
"""
SHA = {"a": "a" * 64, "b": "b" * 64, "c": "c" * 64}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "hosts").mkdir()
    (tmp_path / "hosts" / "fleet.toml").write_text(textwrap.dedent(FLEET))
    return tmp_path


def write_manifest(path: Path, **sha: str) -> Path:
    path.write_text(textwrap.dedent(MANIFEST).format(**{**SHA, **sha}))
    return path


def test_import_adds_url_pins_that_both_readers_see(root: Path, tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path / "sources.manifest")
    before = (root / "hosts" / "fleet.toml").read_text()
    report = pins.import_manifest(inventory.load(root), manifest, from_pin="mia-tp4")
    assert report.added == ("mia-tp4-src-roce-nante", "mia-tp4-src-b12x") and report.written
    assert [r.component for r in report.local_files] == ["local"]
    assert report.local_files[0].commit == "adapters/tp3_pad.py"
    after = (root / "hosts" / "fleet.toml").read_text()
    assert after.startswith(before)  # the old text is untouched, new tables are appended
    inv = inventory.load(root)
    roce = inv.pins["mia-tp4-src-roce-nante"]
    assert (roce.kind, roce.value, roce.source, roce.commit) == (
        "url",
        "a" * 64,
        "https://example.org/roce/archive/1a2b3c4d.tar.gz",
        "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b",
    )
    assert roce.resolved
    doc = tomllib.loads(after)["pins"]["mia-tp4-src-b12x"]
    assert doc == {
        "kind": "url",
        "component": "b12x",
        "url": "https://example.org/b12x/b12x-99aa88bb.tar.gz",
        "sha256": "b" * 64,
        "commit": "99aa88bb",
        "manifest": "mia-tp4",
    }


def test_reimport_updates_only_what_changed_and_reports_stale(root: Path, tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path / "sources.manifest")
    pins.import_manifest(inventory.load(root), manifest, from_pin="mia-tp4")
    first = (root / "hosts" / "fleet.toml").read_text()
    again = pins.import_manifest(inventory.load(root), manifest, from_pin="mia-tp4")
    assert again.unchanged == ("mia-tp4-src-roce-nante", "mia-tp4-src-b12x") and not again.written
    assert (root / "hosts" / "fleet.toml").read_text() == first

    text = textwrap.dedent(MANIFEST).format(**{**SHA, "b": "d" * 64})
    (tmp_path / "m2").write_text("\n".join(line for line in text.splitlines() if "roce" not in line) + "\n")
    third = pins.import_manifest(inventory.load(root), tmp_path / "m2", from_pin="mia-tp4")
    assert third.updated == ("mia-tp4-src-b12x",) and third.stale == ("mia-tp4-src-roce-nante",)
    new = (root / "hosts" / "fleet.toml").read_text()
    assert new.count("# ---- runtime sources") == 1
    assert inventory.load(root).pins["mia-tp4-src-b12x"].value == "d" * 64
    # exactly one line changed
    changed = [(a, b) for a, b in zip(first.splitlines(), new.splitlines(), strict=True) if a != b]
    assert changed == [(f'sha256 = "{"b" * 64}"', f'sha256 = "{"d" * 64}"')]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("roce 1a2b https://x", "expected 4 columns"),
        ("roce 1a2b nothex https://x/a.tgz", "sha256 column is not 64 hex"),
        (f"roce 1a2b {'a' * 64} ftp://x/a.tgz", "url column is not a URL"),
    ],
)
def test_malformed_rows_name_file_and_line(root: Path, tmp_path: Path, line: str, message: str) -> None:
    manifest = tmp_path / "bad.manifest"
    manifest.write_text(f"# header\n{line}\n")
    before = (root / "hosts" / "fleet.toml").read_text()
    with pytest.raises(pins.PinError, match=message) as err:
        pins.import_manifest(inventory.load(root), manifest, from_pin="mia-tp4")
    assert f"{manifest}:2:" in err.value.message
    assert (root / "hosts" / "fleet.toml").read_text() == before


def test_import_needs_a_git_pin(root: Path, tmp_path: Path) -> None:
    with pytest.raises(pins.PinError, match="not a git pin"):
        pins.import_manifest(inventory.load(root), write_manifest(tmp_path / "m"), from_pin="nope")


def test_cli_import_manifest_json_and_dry_run(root: Path, tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path / "sources.manifest")
    runner = CliRunner()
    before = (root / "hosts" / "fleet.toml").read_text()
    dry = runner.invoke(
        main,
        [
            "--root",
            str(root),
            "pins",
            "import-manifest",
            str(manifest),
            "--from",
            "mia-tp4",
            "--dry-run",
            "--json",
        ],
    )
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["added"] == ["mia-tp4-src-roce-nante", "mia-tp4-src-b12x"]
    assert (root / "hosts" / "fleet.toml").read_text() == before
    real = runner.invoke(
        main, ["--root", str(root), "pins", "import-manifest", str(manifest), "--from", "mia-tp4"]
    )
    assert real.exit_code == 0 and "wrote hosts/fleet.toml" in real.output
    assert "1 local file(s)" in real.output


# ---- fleetedit ----------------------------------------------------------------------------------


def test_set_pin_fields_keeps_trailing_comments_and_adds_missing_keys() -> None:
    text = textwrap.dedent(FLEET)
    edit = fleetedit.PinEdit("mia-tp4", {"rev": "c" * 40, "nix_hash": "sha256-" + "A" * 43 + "="})
    out = fleetedit.set_pin_fields(text, edit)
    assert f'rev = "{"c" * 40}"   # prefix from the night-shift log' in out
    lines = out.splitlines()
    assert lines[lines.index('note = "vendored"') + 1] == f'nix_hash = "sha256-{"A" * 43}="'
    assert "[pins.mia-tp4]  # the TP4 production line" in lines
    doc = fleetedit.check_edit(text, out, [edit], {})
    assert doc["pins"]["mia-tp4"]["rev"] == "c" * 40


def test_check_edit_rejects_an_edit_that_touched_more() -> None:
    text = textwrap.dedent(FLEET)
    sneaky = text.replace('address = "a"', 'address = "b"').replace("cad252b7d3", "c" * 40)
    with pytest.raises(AssertionError):
        fleetedit.check_edit(text, sneaky, [fleetedit.PinEdit("mia-tp4", {"rev": "c" * 40})], {})


def test_edits_only_the_named_table() -> None:
    text = textwrap.dedent(FLEET) + '\n[pins.other]\nkind = "git"\nrepo = "a/b"\nrev = "1234"\n'
    out = fleetedit.set_pin_fields(text, fleetedit.PinEdit("other", {"rev": "d" * 40}))
    assert 'rev = "cad252b7d3"' in out and f'rev = "{"d" * 40}"' in out
    with pytest.raises(inventory.InventoryError, match="no \\[pins.missing\\]"):
        fleetedit.set_pin_fields(text, fleetedit.PinEdit("missing", {"rev": "x"}))
