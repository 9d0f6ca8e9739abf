"""The recipe's sections, typed once at load (fleet.sections): the schema and the dataclasses say the
same keys, and every key a real recipe gives reaches its typed field with the value it was given."""

from __future__ import annotations

import dataclasses
import inspect
import tomllib
from pathlib import Path

from sparkfleet.demo.fleet import write_demo_fleet
from sparkfleet.fleet import inventory, sections
from sparkfleet.fleet.sections import RecipeSections

REPO = Path(__file__).resolve().parents[2]
RECIPE = inventory.schema("recipe")["properties"]
# Sections whose dataclass carries every key of the schema's table, under the key's own name.
WHOLE = {
    "world": sections.WorldSection,
    "launch": sections.LaunchSection,
    "watchdog": sections.WatchdogSection,
    "watch": sections.WatchSection,
    "smoke": sections.SmokeSection,
    "bench": sections.BenchSection,
    "view": sections.ViewSection,
    "roofline": sections.RooflineSection,
    "engram": sections.EngramSection,
    "gateway": sections.GatewaySection,
}
# [kit] is read by people and tests; the dataclass carries the keys sparkfleet reads, `reference`
# as `references`.
KIT = {"pin": "pin", "entry": "entry", "commit": "commit", "image": "image", "reference": "references"}


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_every_schema_section_has_its_typed_field():
    """A section or key the schema accepts but no dataclass carries would be dropped at load."""
    assert _fields(RecipeSections) == set(RECIPE) - {"lane", "models"}
    for name, cls in WHOLE.items():
        assert _fields(cls) == set(RECIPE[name]["properties"]), name
    quality = RECIPE["bench"]["properties"]["quality"]["properties"]
    assert _fields(sections.BenchQualitySection) == set(quality)
    cases = RECIPE["smoke"]["properties"]["cases"]["items"]["properties"]
    assert _fields(sections.SmokeCaseSection) == set(cases)
    tables = RECIPE["engram"]["properties"]["tables"]["items"]["properties"]
    assert _fields(sections.EngramTableSection) == set(tables)
    reference = RECIPE["kit"]["properties"]["reference"]["items"]["properties"]
    assert _fields(sections.KitReference) == set(reference)
    assert set(KIT) <= set(RECIPE["kit"]["properties"]) and _fields(sections.KitSection) == set(KIT.values())


def test_every_section_is_a_frozen_documented_dataclass():
    members = inspect.getmembers(sections, inspect.isclass)
    classes = [c for _, c in members if c.__module__ == sections.__name__]
    assert len(classes) == 16  # 11 sections, 5 of their parts
    for cls in classes:
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls.__name__
        # a dataclass without a docstring gets its signature as one: refuse that
        assert cls.__doc__ and not cls.__doc__.startswith(f"{cls.__name__}("), cls.__name__


def _plain(value):
    """A typed value as the TOML would spell it: dataclasses as tables, tuples as arrays."""
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _given(doc: dict, typed: dict) -> dict:
    """The typed table cut down to the keys the recipe gives (the rest are defaults or None)."""
    return {k: _section_value(doc[k], typed[k]) for k in doc}


def _section_value(given, typed):
    if isinstance(given, dict) and isinstance(typed, dict):
        return _given(given, typed)
    if isinstance(given, list) and given and isinstance(given[0], dict):
        return [_given(g, t) for g, t in zip(given, typed, strict=True)]
    return typed


def _recipes(tmp_path: Path) -> list[tuple[Path, dict, RecipeSections]]:
    out = []
    for root in (REPO, write_demo_fleet(tmp_path / "demo").root):
        inv = inventory.load(root)
        for lane in inv.lanes.values():
            out.append((lane.recipe_path, tomllib.loads(lane.recipe_path.read_text()), lane.sections))
    return out


def test_every_key_a_recipe_gives_reaches_its_field(tmp_path):
    """Each real recipe (the repository's and the demo's): every key it writes, read back from the
    typed sections, has the value the TOML gave; a section it leaves out is the empty default."""
    found = _recipes(tmp_path)
    assert len(found) == 4  # three in recipes/, the demo's lane
    seen = set()
    for path, doc, typed in found:
        for name in WHOLE:
            section = getattr(typed, name)
            if name not in doc:
                assert section in (None, getattr(RecipeSections(), name)), (path, name)
                continue
            seen.add(name)
            assert _section_value(doc[name], _plain(section)) == doc[name], (path, name)
        if "kit" in doc:
            seen.add("kit")
            kit = _plain(typed.kit)
            assert {k: kit[v] for k, v in KIT.items() if k in doc["kit"] and k != "reference"} == {
                k: doc["kit"][k] for k in KIT if k in doc["kit"] and k != "reference"
            }
            refs = doc["kit"].get("reference", [])
            assert [_given(r, t) for r, t in zip(refs, kit["references"], strict=True)] == refs, path
    assert seen == {"world", "launch", "watchdog", "smoke", "bench", "kit", "gateway", "roofline", "engram"}


def test_the_sections_no_real_recipe_writes_reach_their_fields():
    """[watch], [view] and every [gateway] key, and the [engram] keys the real recipes leave out."""
    doc = {
        "watch": {"interval_s": 5.0, "latency_s": 4.0, "prompt": "2+2?", "expect": "4", "max_restarts": 3,
                  "window_s": 600.0, "backoff_s": 2.0},
        "view": {"reference_tps": 42.5, "decode_floor_pct": 70},
        "gateway": {"policy": "round_robin", "replicas": [["a"], ["b"]]},
        "engram": {"pin": "p", "layout": "sparse-shards", "shards_rank": 1, "layers": [3], "rows": {"3": 10},
                   "tables": [{"layer": 3, "parts": ["x", "y"]}], "row_bytes": 8, "out_dir": "/e/{lane}",
                   "mount": "/m"},
    }  # fmt: skip
    typed = sections.recipe_sections(doc)
    for name, table in doc.items():
        assert _section_value(table, _plain(getattr(typed, name))) == table, name
    parts = ["a.{layer}", "b.{layer}"]
    assert sections.recipe_sections({"engram": {"pin": "p", "pattern": parts}}).engram.pattern == tuple(parts)


def test_a_replica_lane_moves_its_declared_ranks_with_its_hosts(tmp_path):
    """`replica_lane` re-places [world] ranks by position on the copy's hosts; the source keeps its own."""
    lane = inventory.Lane(
        "l", ("a", "b"), (), tmp_path / "recipe.toml",
        sections=sections.recipe_sections(
            {"world": {"tp": 2, "ranks": {"a": 1, "b": 0}}, "gateway": {"replicas": [["a", "b"], ["c", "d"]]}}
        ),
    )  # fmt: skip
    copy = inventory.replica_lane(lane, 1)
    assert copy.hosts == ("c", "d") and copy.sections.world.ranks == {"c": 1, "d": 0}
    assert lane.sections.world.ranks == {"a": 1, "b": 0} and copy.sections.world.tp == 2
    assert inventory.replica_sets(copy) == [("a", "b"), ("c", "d")]
