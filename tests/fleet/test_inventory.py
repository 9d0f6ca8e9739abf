"""The inventory: one TOML truth, validated; every error names file, key path and expectation."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkfleet.base.errors import InventoryError
from sparkfleet.cli import main
from sparkfleet.fleet import inventory

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fleet_copy(tmp_path: Path) -> Path:
    """A private copy of the repository's real inventory, safe to break."""
    shutil.copytree(REPO / "hosts", tmp_path / "hosts", ignore=shutil.ignore_patterns("dgx*"))
    shutil.copytree(REPO / "recipes", tmp_path / "recipes", ignore=shutil.ignore_patterns("reports"))
    return tmp_path


def test_repository_inventory_loads():
    inv = inventory.load(REPO)
    assert sorted(inv.hosts) == ["dgx1", "dgx2", "dgx3", "dgx4"]
    assert inv.lane("dsv41-flash-exl3-2x").hosts == ("dgx1", "dgx2")
    assert inv.lane("dsv41-flash-4x-mia").hosts == ("dgx1", "dgx2", "dgx3", "dgx4")
    assert inv.host("dgx3").local_hub == Path("/home/kilork/hf-local/hub")
    exl3 = inv.lane("dsv41-flash-exl3-2x")
    assert [m.repo for m in exl3.models] == [
        "coolbho3k/DeepSeek-V4.1-Flash-EXL3-3bpw",
        "coolbho3k/DeepSeek-V4.1-Flash-DSpark-EXL3-3bpw",
    ]
    assert exl3.models[0].exclude == ("page15/*",)
    (mia,) = inv.lane("dsv41-flash-4x-mia").models
    assert (mia.repo, mia.revision) == ("deepseek-ai/DeepSeek-V4.1-Flash", "fb2764a5")


def test_partial_facts_are_kept_as_given_and_unresolved():
    inv = inventory.load(REPO)
    assert inv.pins["dsv41-flash"].value == "fb2764a5"
    assert not inv.pins["dsv41-flash"].resolved
    assert inv.pins["mia-tp4"].value == "cad252b7d3"
    assert not inv.pins["mia-tp4"].resolved
    base = inv.pins["sglang-dsv41-base"]  # resolved from the pinned repo; still the log's prefix
    assert base.resolved and base.value.startswith("sha256:3dbc3130")
    full = inventory.Pin("x", "git", "a" * 40, "o/r")
    assert full.resolved


@pytest.mark.parametrize(
    ("file", "old", "new", "expected"),
    [
        ("hosts/fleet.toml", 'address = "dgx2"', 'address = "dgx2"\nssh_port = "22"',
         ["hosts/fleet.toml", "hosts.dgx2.ssh_port", "is not of type 'integer'"]),
        ("hosts/fleet.toml", 'local_hub = "/home/kilork/hf-local/hub"', 'local_hub = "relative/hub"',
         ["defaults.local_hub", "does not match"]),
        ("hosts/fleet.toml", 'rev = "cad252b7d3"', 'rev = "not-hex"', ["pins.mia-tp4.rev", "does not match"]),
        ("recipes/dsv41-flash-exl3-2x/recipe.toml", 'hosts = ["dgx1", "dgx2"]', 'hosts = ["dgx1", "dgx9"]',
         ["recipe.toml", "lane.hosts[1]", "unknown host 'dgx9'"]),
        ("recipes/dsv41-flash-exl3-2x/recipe.toml", 'pin = "exl3-dspark-drafter"', 'pin = "mia-tp4"',
         ["models[1].pin", "is not an hf pin"]),
        ("recipes/dsv41-flash-4x-mia/recipe.toml", "[[models]]", "[[models]]\nbogus = 1",
         ["models[0]", "bogus"]),
        ("hosts/fleet.toml", "schema_version = 1", "schema_version = [",
         ["hosts/fleet.toml", "not valid TOML"]),
    ],
)  # fmt: skip
def test_errors_name_file_key_and_expectation(fleet_copy, file, old, new, expected):
    path = fleet_copy / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(InventoryError) as exc:
        inventory.load(fleet_copy)
    for fragment in expected:
        assert fragment in str(exc.value), (fragment, str(exc.value))


def test_missing_host_field_without_default(fleet_copy):
    path = fleet_copy / "hosts" / "fleet.toml"
    path.write_text(path.read_text().replace('nas_hub = "/mnt/nas/huggingface/hub"', ""))
    with pytest.raises(InventoryError, match=r"hosts\.dgx1: missing nas_hub"):
        inventory.load(fleet_copy)


def test_cli_check_ok_and_failing(fleet_copy):
    runner = CliRunner()
    ok = runner.invoke(main, ["--root", str(fleet_copy), "inventory", "check", "--json"])
    assert ok.exit_code == 0, ok.output
    assert '"unresolved_pins"' in ok.output
    path = fleet_copy / "hosts" / "fleet.toml"
    path.write_text(path.read_text().replace("reserve_gib = 64", "reserve_gib = -1"))
    bad = runner.invoke(main, ["--root", str(fleet_copy), "inventory", "check"])
    assert bad.exit_code == 2
    assert "defaults.reserve_gib" in bad.output and "Traceback" not in bad.output


def test_every_verb_is_registered_under_its_own_name():
    """The CLI imports verbs lazily by name: each COMMANDS entry must be a command of that name."""
    from sparkfleet.cli import COMMANDS
    from sparkfleet.cli import main as cli_main

    ctx = cli_main.make_context("sparkfleet", ["--help"], resilient_parsing=True)
    for _, name in COMMANDS:
        command = cli_main.get_command(ctx, name)
        assert command is not None and command.name == name, name
    assert "stage" in cli_main.list_commands(ctx)
