# ruff: noqa: E501  (the case table reads best one case per line)
"""`inventory check`: every problem listed with its key path, hostile values refused.

Each case here passed `inventory check` before: an env *key* smuggling a second variable through
docker's env file, values with a trailing newline, options disguised as addresses or images, a
revision walking out of the hub, an invalid weight-load regex that only crashed after the ranks
started, a tp that does not fit the lane's hosts.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkfleet.base.errors import ExitCode, InventoryError
from sparkfleet.cli import main
from sparkfleet.fleet import inventory

REPO = Path(__file__).resolve().parents[2]
FLEET = "hosts/fleet.toml"
MIA = "recipes/dsv41-flash-4x-mia/recipe.toml"
EXL3 = "recipes/dsv41-flash-exl3-2x/recipe.toml"


@pytest.fixture
def fleet_copy(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "hosts", tmp_path / "hosts", ignore=shutil.ignore_patterns("dgx*"))
    shutil.copytree(REPO / "recipes", tmp_path / "recipes", ignore=shutil.ignore_patterns("reports"))
    return tmp_path


def edit(root: Path, file: str, old: str, new: str) -> None:
    path = root / file
    text = path.read_text()
    assert old in text, (file, old)
    path.write_text(text.replace(old, new, 1))


def run_check(root: Path) -> tuple[int, dict]:
    out = CliRunner().invoke(main, ["--root", str(root), "inventory", "check", "--json"])
    assert "Traceback" not in out.output, out.output
    return out.exit_code, json.loads(out.stdout)


def problem_keys(result: dict) -> list[tuple[str, str]]:
    return [(Path(p["file"]).name, p["key"]) for p in result["problems"]]


@pytest.mark.parametrize(
    ("file", "old", "new", "key", "fragment"),
    [
        # an env key with a newline set LD_PRELOAD and a second TP_SIZE in the container
        (MIA, 'NCCL_CUMEM_ENABLE = "0"', '"X\\nLD_PRELOAD" = "/tmp/evil.so"', "launch.env", "'X\\nLD_PRELOAD'"),
        (MIA, 'NCCL_CUMEM_ENABLE = "0"', '"A=B" = "1"', "launch.env", "'A=B'"),
        # the derived-key guard is case-insensitive
        (MIA, 'NCCL_CUMEM_ENABLE = "0"', 'tp_size = "3"', "launch.env", "tp_size"),
        # trailing newlines, leading dashes
        (FLEET, 'address = "dgx2"', 'address = "dgx2\\n"', "hosts.dgx2.address", "does not match"),
        (FLEET, 'address = "dgx2"', 'address = "-oProxyCommand=touch /tmp/x"', "hosts.dgx2.address", "match"),
        (FLEET, 'image = "lmsysorg/sglang"', 'image = "--privileged"', "pins.sglang-dsv41-base.image", "match"),
        (FLEET, 'local_hub = "/home/kilork/hf-local/hub"', 'local_hub = "/home/../etc"', "defaults.local_hub", ""),
        (FLEET, 'ssh_user = "kilork"', 'ssh_user = "kilork\\n"', "defaults.ssh_user", "does not match"),
        # a revision with .. wrote refs/ outside the destination hub
        (FLEET, 'revision = "fb2764a5"', 'revision = "../../../../tmp/x"', "pins.dsv41-flash.revision", ""),
        (FLEET, 'revision = "fb2764a5"', 'revision = "main\\n"', "pins.dsv41-flash.revision", ""),
        # an enum names its valid values
        (FLEET, '\nkind = "hf"', '\nkind = "hff"', "pins.dsv41-flash.kind", "'hff': expected one of hf, git, oci, url"),
        # checked at check time, not after the ranks started
        (MIA, "[launch.env]", 'weight_load_regex = "elapsed=("\n\n[launch.env]', "launch.weight_load_regex",
         "not a valid regex"),
        # `tp = 3` on a 2-host lane passed inventory check
        (EXL3, "tp = 2", "tp = 3", "world", "tp=3 is not divisible by nnodes=2"),
        # the receipt cleanup's cache dir must stay under the host's state dir
        (MIA, "[launch.env]", 'cache_dir = "/usr"\n\n[launch.env]', "launch.cache_dir", "does not match"),
        (MIA, "[launch.env]", 'cache_dir = "{state_dir}/../.."\n\n[launch.env]', "launch.cache_dir", ""),
    ],
)  # fmt: skip
def test_hostile_values_are_problems_with_key_paths(fleet_copy, file, old, new, key, fragment):
    edit(fleet_copy, file, old, new)
    code, result = run_check(fleet_copy)
    assert code == ExitCode.USAGE
    mine = [p for p in result["problems"] if p["key"] == key or p["key"].startswith((key + ".", key + "["))]
    assert mine, result["problems"]
    assert any(fragment in p["message"] for p in mine), mine
    # launch-time and load-time readers refuse the same inventory (nothing half-loaded)
    if file == FLEET or key in ("launch.env", "launch.cache_dir") and "does not match" in fragment:
        with pytest.raises(InventoryError):
            inventory.load(fleet_copy)


def test_every_problem_is_listed_not_the_first(fleet_copy):
    edit(fleet_copy, FLEET, 'address = "dgx2"', 'address = "-dgx2"')
    edit(fleet_copy, FLEET, 'address = "dgx3"', 'address = "dgx3\\n"')
    edit(fleet_copy, FLEET, '\nkind = "hf"', '\nkind = "hff"')
    code, result = run_check(fleet_copy)
    assert code == ExitCode.USAGE
    keys = {k for _, k in problem_keys(result)}
    assert {"hosts.dgx2.address", "hosts.dgx3.address", "pins.dsv41-flash.kind"} <= keys, keys
    # the text form lists them too, one per line, each with file and key path
    out = CliRunner().invoke(main, ["--root", str(fleet_copy), "inventory", "check"])
    assert out.exit_code == ExitCode.USAGE
    assert "3 problems" in out.output and out.output.count("fleet.toml: hosts.dgx") == 2


def test_recipe_problems_across_lanes_are_all_listed(fleet_copy):
    edit(fleet_copy, EXL3, "tp = 2", "tp = 3")
    edit(fleet_copy, MIA, 'NCCL_CUMEM_ENABLE = "0"', 'NNODES = "4"')
    edit(fleet_copy, MIA, "[launch.env]", 'weight_load_regex = "(["\n\n[launch.env]')
    code, result = run_check(fleet_copy)
    assert code == ExitCode.USAGE
    assert ("recipe.toml", "world") in problem_keys(result)
    assert ("recipe.toml", "launch.env") in problem_keys(result), result
    assert ("recipe.toml", "launch.weight_load_regex") in problem_keys(result)


def test_lane_folder_names_are_validated(fleet_copy):
    shutil.copytree(fleet_copy / "recipes" / "dsv41-flash-exl3-2x", fleet_copy / "recipes" / "-rf lane")
    code, result = run_check(fleet_copy)
    assert code == ExitCode.USAGE
    assert any(p["key"] == "(lane folder name)" and "'-rf lane'" in p["message"] for p in result["problems"])
    with pytest.raises(InventoryError, match="not a valid lane name"):
        inventory.load(fleet_copy)


def test_repository_inventory_checks_clean():
    code, result = run_check(REPO)
    assert code == 0 and result["ok"] and result["problems"] == []


def test_schema_patterns_match_like_ecmascript_not_python_dollar():
    """JSON Schema patterns are ECMA-262: `$` is the end of input, never 'before a final newline'."""
    from sparkfleet.fleet.inventory import schema_problems

    doc = {
        "schema_version": 1,
        "hosts": {"h": {"address": "h", "ssh_user": "u", "local_hub": "/a", "nas_hub": "/b"}},
    }
    assert schema_problems(doc, "fleet", Path("f")) == []
    doc["hosts"]["h"]["ssh_user"] = "u\n"
    assert [p.key for p in schema_problems(doc, "fleet", Path("f"))] == ["hosts.h.ssh_user"]
    doc["hosts"]["h\n"] = doc["hosts"].pop("h")
    doc["hosts"]["h\n"]["ssh_user"] = "u"
    assert [p.key for p in schema_problems(doc, "fleet", Path("f"))] == ["hosts['h\\n']"]


def test_engram_wiring_problems_are_listed(fleet_copy):
    engram = '\n[engram]\npin = "{pin}"\npattern = "layers.{{layer}}.engram.weight"\nout_dir = "{out}"\n'
    edit(fleet_copy, EXL3, "[world]", engram.format(pin="mia-tp4", out="/x/{lane}") + "\n[world]")
    code, result = run_check(fleet_copy)
    assert code == ExitCode.USAGE
    assert any(p["key"] == "engram" and "not an hf pin" in p["message"] for p in result["problems"])
    edit(fleet_copy, EXL3, 'pin = "mia-tp4"', 'pin = "dsv41-flash"')
    edit(fleet_copy, EXL3, 'out_dir = "/x/{lane}"', 'out_dir = "/x/{rank}"')
    code, result = run_check(fleet_copy)
    assert code == ExitCode.USAGE
    assert any(p["key"] == "engram" and "placeholder" in p["message"] for p in result["problems"])


def test_an_unresolved_image_pin_is_a_note_not_a_problem(fleet_copy):
    edit(fleet_copy, FLEET, 'digest = "sha256:30557154', 'digest = "sha256:30557154"\n#')
    code, result = run_check(fleet_copy)
    assert code == 0, result["problems"]
    assert any("exl3-kit-image is resolved" in w for w in result["warnings"]), result["warnings"]


def test_a_bad_env_value_is_reported_without_echoing_it(fleet_copy):
    edit(fleet_copy, MIA, 'NCCL_CUMEM_ENABLE = "0"', 'HF_TOKEN = "hf_s3cret\\nX=1"')
    code, result = run_check(fleet_copy)
    assert code == ExitCode.USAGE
    assert any(p["key"] == "launch.env.HF_TOKEN" for p in result["problems"]), result["problems"]
    assert "hf_s3cret" not in json.dumps(result)
    with pytest.raises(InventoryError) as exc:
        inventory.load(fleet_copy)
    assert "hf_s3cret" not in str(exc.value)
