"""Property: whatever hostile value lands in the inventory, `inventory check` refuses it or it is safe.

Hypothesis writes values an attacker or a careless operator would (newlines, NULs, leading dashes,
`..`, shell metacharacters, lookalike env keys, broken regexes, shapes that do not fit the lane)
into a copy of the repository's real fleet.toml and recipes. An oracle written here, independent
of the schema, says whether each value is safe to reach ssh, docker, a file path or an env file;
every unsafe one must be reported by `inventory check` (with its key path), `load` must refuse
it too, and nothing may crash with a traceback.
"""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkfleet.base.errors import InventoryError
from sparkfleet.fleet import inventory
from sparkfleet.lane.recipe import launch_recipe
from sparkfleet.lane.spec import DERIVED_KEYS, recipe_problems

from .tally import bad_input, count

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
MIA = "recipes/dsv41-flash-4x-mia/recipe.toml"
EXL3 = "recipes/dsv41-flash-exl3-2x/recipe.toml"

HOSTILE = st.sampled_from(
    ["\n", "\r", "\0", "\t", " ", "-", "--", "..", "/", "$(id)", "`id`", ";", "|", "&", "=", "'", '"',
     "*", "\\", "é", "\u202e", "\x7f", "\x1b[31m", "a", "Z", "0", "_", ".", ":", "@", "{", "}"]
)  # fmt: skip
TEXT = st.lists(HOSTILE, min_size=0, max_size=6).map("".join) | st.text(
    st.characters(blacklist_categories=("Cs",)), max_size=12
)
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _string(v: str) -> str:
    # A JSON string is a TOML basic string, once non-ASCII stays literal and DEL is escaped too.
    return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml(value) -> str:
    """A minimal TOML writer: JSON strings are TOML basic strings; tables become inline tables."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_string(k)} = {toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(toml(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _string(value)
    return repr(value)


def write(path: Path, doc: dict) -> None:
    path.write_text("\n".join(f"{_string(k)} = {toml(v)}" for k, v in doc.items()) + "\n")


def safe_path(v: str) -> bool:
    return v.startswith("/") and not CONTROL.search(v) and ".." not in v.split("/")


def safe_word(v: str) -> bool:  # reaches argv of ssh/docker or a file name
    return bool(v) and not v.startswith("-") and not CONTROL.search(v) and " " not in v and ".." not in v


def safe_env_key(k: str) -> bool:
    return re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) is not None and k.upper() not in DERIVED_KEYS


def compiles(v: str) -> bool:
    try:
        re.compile(v)
    except re.error:
        return False
    return True


# (file, key path, oracle): where a hostile value goes and what would make it safe there.
TARGETS = [
    ("fleet", ("hosts", "dgx2", "address"), safe_word),
    ("fleet", ("hosts", "dgx2", "ssh_user"), safe_word),
    ("fleet", ("defaults", "local_hub"), safe_path),
    ("fleet", ("defaults", "nas_hub"), safe_path),
    ("fleet", ("hosts", "dgx3", "state_dir"), safe_path),
    (
        "fleet",
        ("pins", "dsv41-flash", "revision"),
        lambda v: safe_word(v) and "//" not in v and not v.endswith("/"),
    ),
    ("fleet", ("pins", "dsv41-flash", "repo"), lambda v: safe_word(v) and v.count("/") == 1),
    ("fleet", ("pins", "sglang-dsv41-base", "image"), lambda v: safe_word(v) and v == v.lower()),
    ("mia", ("launch", "env", "<key>"), safe_env_key),
    ("mia", ("launch", "env", "NCCL_CUMEM_ENABLE"), lambda v: not re.search(r"[\n\r\0]", v)),
    ("mia", ("launch", "cache_dir"), lambda v: v.startswith("{state_dir}/") and safe_path(v[11:])),
    ("mia", ("launch", "hub_mount"), safe_path),
    ("mia", ("launch", "weight_load_regex"), compiles),
]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("inv")
    shutil.copytree(REPO / "hosts", root / "hosts", ignore=shutil.ignore_patterns("dgx*"))
    shutil.copytree(REPO / "recipes", root / "recipes", ignore=shutil.ignore_patterns("reports"))
    return root


def _set(doc: dict, path: tuple[str, ...], value) -> None:
    for key in path[:-1]:
        doc = doc.setdefault(key, {})
    doc[path[-1]] = value


@pytest.mark.surface("file:hosts/fleet.toml", "file:recipe.toml")
@given(target=st.sampled_from(TARGETS), value=TEXT, prefix=st.sampled_from(["", "/", "{state_dir}/", "a"]))
def test_unsafe_values_are_always_refused_with_their_key_path(
    base, tmp_path_factory, figures, target, value, prefix
):
    which, path, safe = target
    value = prefix + value
    root = tmp_path_factory.mktemp("case")
    shutil.copytree(base, root, dirs_exist_ok=True)
    file = root / ("hosts/fleet.toml" if which == "fleet" else MIA)
    doc = tomllib.loads(file.read_text())
    if path[-1] == "<key>":
        _set(doc, (*path[:-1], value), "1")
    else:
        _set(doc, path, value)
    write(file, doc)
    checked = inventory.check(root)  # never a traceback
    problems = [str(p) for p in checked.problems]
    if checked.inventory is not None:
        for name in checked.inventory.lanes:
            if checked.inventory.lanes[name].sections.launch is not None:
                try:
                    found = recipe_problems(checked.inventory, launch_recipe(checked.inventory, name))
                except InventoryError as exc:
                    found = [("launch", exc)]
                problems += [f"{k}: {e.message}" for k, e in found]
    count(figures, "inventory-values", "values_tried")
    if not safe(value):  # the oracle above, not inventory check, says it is bad
        bad_input(figures, "inventory-values", refused=bool(problems))
        assert problems, f"unsafe {path}={value!r} passed inventory check"
        if checked.problems:
            with pytest.raises(InventoryError):
                inventory.load(root)


@pytest.mark.surface("file:recipe.toml")
@given(
    tp=st.integers(min_value=-2, max_value=9),
    hosts=st.integers(min_value=1, max_value=4),
    ep=st.integers(min_value=1, max_value=5),
    launcher=st.sampled_from(["tp2", "tp3", "tp4", "x"]),
)
def test_shapes_that_cannot_run_fail_inventory_check_not_launch(
    base, tmp_path_factory, figures, tp, hosts, ep, launcher
):
    """Issue 12: `tp = 3` on a 2-host lane passed inventory check and failed only at launch."""
    root = tmp_path_factory.mktemp("shape")
    shutil.copytree(base, root, dirs_exist_ok=True)
    file = root / EXL3
    doc = tomllib.loads(file.read_text())
    doc["lane"]["hosts"] = ["dgx1", "dgx2", "dgx3", "dgx4"][:hosts]
    doc["world"] = {"tp": tp, "ep": ep, "launcher": launcher}
    write(file, doc)
    checked = inventory.check(root)
    runs = tp >= 1 and tp % hosts == 0 and tp % ep == 0 and (launcher == "x" or launcher == f"tp{tp}")
    problems = list(checked.problems)
    if checked.inventory is not None and "dsv41-flash-exl3-2x" in checked.inventory.lanes:
        problems += recipe_problems(
            checked.inventory, launch_recipe(checked.inventory, "dsv41-flash-exl3-2x")
        )
    count(figures, "world-shapes", "values_tried")
    if not runs:
        bad_input(figures, "world-shapes", refused=bool(problems))
        assert problems, (tp, hosts, ep, launcher)
    else:
        assert not problems, problems
