"""Every reader of a generation record, fuzzed: history, promote, rollback, release cut and watch.

A generation record (recipes/<lane>/generations/<id>.json) is a file anyone with the checkout can
edit. A record the validator let through once crashed its readers: a boot `{"cache": null}` was a
TypeError in `history`, `"image_ids": [...]` an AttributeError in `release cut`. Here hypothesis
puts any JSON value at (or removes) any field a reader takes apart, in a record otherwise as
`launch` writes it, and then every reader runs on it:

* `sparkfleet history` (text and --json);
* `promote` (the pure gate: smoke and bench verdicts given) and `rollback` (stop and launch given;
  the record's own fleet file and recipe are loaded as an inventory);
* `release cut` (up to its registry tag, which an unreachable registry refuses);
* watch: its incident bundle (the agent asked on this machine) names the current generation, its
  restart and `status` read the NAS-weights note, the next launch compares its boot with the last.

Whatever the value, each reader either works or fails with a SparkfleetError (a one-line error,
exit code, no traceback). The oracle written here (what the writer gives each field) says when a
value is bad; only those are counted, and each must be refused by the validator: skipped by
history, refused by promote and rollback, never current.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from sparkfleet.base.errors import SparkfleetError
from sparkfleet.bench.target import serving_weights
from sparkfleet.cli import main as cli
from sparkfleet.fleet import inventory
from sparkfleet.images.registry import Registry
from sparkfleet.launch import generations as gens
from sparkfleet.launch import release
from sparkfleet.launch.report import LaunchReport
from sparkfleet.ops.supervisor import collect_incident
from support.lanefleet import MODELS, write_fleet

from .tally import bad_input, count

LANE = "demo"
T0 = 1_700_000_000.0
IMAGE_ID = "sha256:" + "ab" * 32

RECIPE = """
[lane]
hosts = ["spark"]

[world]
tp = 1

[launch]
runtime = "process"
port = 30999
fabric = "none"
command = ["true"]
""" + MODELS


def _text(v: Any) -> bool:
    return isinstance(v, str)


def _opt(p):
    return lambda v: v is None or p(v)


def _finite(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v)


def _seconds(v: Any) -> bool:
    return _finite(v) and v >= 0


def _object(v: Any) -> bool:
    return isinstance(v, dict)


def _list_of(p):
    return lambda v: isinstance(v, list) and all(p(x) for x in v)


def _map_of(p):
    return lambda v: isinstance(v, dict) and all(p(x) for x in v.values())


def _fields(spec: dict[str, Any], required: tuple[str, ...] = ()):
    return lambda v: isinstance(v, dict) and all(
        p(v.get(k)) for k, p in spec.items() if k in v or k in required
    )


BOOT = {"cache": lambda v: v in ("warm", "cold", "none"), "cache_key": _opt(_text), "regression": _opt(_text),
        "time_to_ready_s": _opt(_seconds), "previous_s": _opt(_seconds), "weight_load_s": _opt(_seconds),
        "per_host": _opt(_object)}  # fmt: skip
IMAGE = {"pin": _opt(_text), "ref": _opt(_text)}
def _count(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int) and v >= 0


NAS_FIELDS = {"note": _text, "files": _opt(_count), "paths": _opt(_list_of(_text))}
NAS = _fields(NAS_FIELDS, required=("note",))

# The oracle: what the writers (launch, promote, rollback, stop) put at each field, so what every
# reader may take apart. A path not listed under a listed one is the value's own business.
SPEC: dict[tuple, Any] = {
    ("created_at",): _finite,
    ("status",): lambda v: v in ("ready", "started", "failed"),
    ("fleet_text",): _text,
    ("good",): lambda v: isinstance(v, bool),
    ("image",): _opt(_fields(IMAGE)),
    ("image", "ref"): IMAGE["ref"],
    ("image", "pin"): IMAGE["pin"],
    ("image_ids",): _map_of(_opt(_text)),
    ("image_ids", "spark"): _opt(_text),
    ("pins",): _map_of(_object),
    ("hosts",): _list_of(_text),
    ("fingerprints",): _map_of(_object),
    ("drift",): _list_of(_text),
    ("drift", 0): _text,
    ("canary",): _opt(_object),
    ("memory",): _object,
    ("boot",): _fields(BOOT),
    **{("boot", k): p for k, p in BOOT.items()},
    ("nas_weights",): _map_of(NAS),
    ("nas_weights", "spark"): NAS,
    ("nas_weights", "spark", "note"): _text,
    ("nas_weights", "spark", "files"): NAS_FIELDS["files"],
    ("cache_seed",): _map_of(_object),
    ("promotion",): _opt(_object),
    ("rolled_back_to",): _opt(_text),
    ("rolled_back_from",): _opt(_text),
    ("stopped_at",): _opt(_finite),
    ("stopped_why",): _opt(_text),
}
# removing these leaves a record no reader can place (its name, its lane, its recipe, its time)
REQUIRED = {("id",), ("lane",), ("status",), ("recipe_text",), ("recipe_sha256",), ("fleet_text",),
            ("created_at",), ("nas_weights", "spark", "note")}  # fmt: skip

SCALARS = (
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats() | st.text(max_size=6)
    | st.sampled_from(["warm", "cold", "none", "ready", "failed", IMAGE_ID, ""])
)  # fmt: skip
KEYS = st.sampled_from(["cache", "ref", "note", "files", "spark", "time_to_ready_s", "pin", "x"]) | st.text(
    max_size=3
)
VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=6,
)


def _record(root: Path) -> dict:
    """A record as `launch` writes it, marked good (so promote, rollback and release cut read it)."""
    recipe = (root / "recipes" / LANE / "recipe.toml").read_text()
    return {
        "id": gens.utc_id(T0), "lane": LANE, "created_at": T0, "status": "ready", "good": True,
        "image": {"pin": "demo-image", "ref": "registry.example/demo@sha256:" + "cd" * 32},
        "image_ids": {"spark": IMAGE_ID}, "pins": {"demo-weights": {"kind": "hf", "value": "5" * 40}},
        "recipe_sha256": hashlib.sha256(recipe.encode()).hexdigest(), "recipe_text": recipe,
        "fleet_text": (root / "hosts" / "fleet.toml").read_text(), "hosts": ["spark"],
        "fingerprints": {"spark": {"kernel": "6.8", "image_id": IMAGE_ID}}, "drift": ["dgx9: kernel 6.9"],
        "canary": None, "memory": {"spark": {"free_gib": 100}},
        "boot": {"cache_key": "k1", "cache": "warm", "per_host": {"spark": {"warm": True}},
                 "time_to_ready_s": 12.5, "weight_load_s": 3.0, "regression": None, "previous_s": 12.0},
        "nas_weights": {"spark": {"note": "weights from NAS on spark (1 files)", "files": 1, "paths": ["a"]}},
        "cache_seed": {"spark": {"files": 3}},
        "promotion": {"at": T0 + 60, "smoke_ok": True, "smoke": [], "bench_report": "reports/x.json",
                      "gate": "baseline", "regressions": [], "promoted": True},
        "rolled_back_to": None, "rolled_back_from": None, "stopped_at": None,
    }  # fmt: skip


def _mutate(gen: dict, path: tuple, value: Any, remove: bool) -> None:
    parent = gen
    for key in path[:-1]:
        parent = parent[key]
    if remove:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value


def _clean(res) -> bool:
    """A CLI run that worked or said why in a line: never a traceback, never an uncaught exception."""
    return (res.exception is None or isinstance(res.exception, SystemExit)) and "Traceback" not in res.output


PATHS = sorted(SPEC | {p: None for p in REQUIRED}, key=repr)


@pytest.mark.slow  # each example runs every reader, the agent's incident bundle included (~1 s)
@pytest.mark.surface("file:generation record", "cli:history", "cli:promote", "cli:rollback",
                     "cli:release cut", "cli:watch")  # fmt: skip
@given(path=st.sampled_from(PATHS), value=VALUES, remove=st.booleans())
def test_every_reader_of_a_generation_record_works_or_refuses_it(
    tmp_path_factory, monkeypatch, figures, path, value, remove
):
    tmp = tmp_path_factory.mktemp("gen")
    host = {"address": "localhost", "ssh_user": "root", "local_hub": str(tmp / "hub"),
            "nas_hub": str(tmp / "nas"), "state_dir": str(tmp / "state")}  # fmt: skip
    root = write_fleet(tmp / "fleet", {"spark": host}, {LANE: RECIPE})
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp / "operator"))
    gen = _record(root)
    original = {k: gen[k] for k in ("recipe_text", "recipe_sha256")}
    _mutate(gen, path, value, remove)
    if remove:
        known_bad = path in REQUIRED
    elif path in (("id",), ("lane",)):
        known_bad = value != {"id": gens.utc_id(T0), "lane": LANE}[path[0]]
    elif path in (("recipe_text",), ("recipe_sha256",)):
        known_bad = value != original[path[0]]
    else:
        known_bad = not SPEC[path](value)
    d = gens.generations_dir(root, LANE)
    d.mkdir(parents=True)
    rec = d / f"{gens.utc_id(T0)}.json"
    rec.write_text(json.dumps(gen))
    count(figures, "generation-record", "records_tried")

    # history, as the operator reads it
    runner = CliRunner()
    for extra in ([], ["--json"]):
        res = runner.invoke(cli, ["--root", str(root), "history", LANE, *extra])
        assert _clean(res) and res.exit_code == 0, (path, value, res.output, res.exception)
    listed = json.loads(res.stdout)
    shown = [g["id"] for g in listed["generations"]]
    refused = shown == [] and any(s.startswith(str(rec)) for s in listed["skipped"])
    if known_bad:
        bad_input(figures, "generation-record", refused=refused)
        assert refused, f"{path} = {value!r} is not what any writer gives it, yet history lists it"
    else:
        assert shown == [gen["id"]], f"{path} = {value!r} is a writer's value, yet it was skipped: {listed}"

    # watch: the incident bundle names the current generation; restarts and status read the NAS note
    inv = inventory.load(root)
    bundle = collect_incident(inv, LANE, "fuzzed record", root=root)
    summary = json.loads((bundle / "summary.json").read_text())
    assert summary["generation"] == (None if refused else gen["id"]), summary
    serving_weights(inv, LANE)
    gens.boot_record("k1", {"spark": {"warm": True}}, 10.0, 2.0, gens.load_all(root, LANE), 20.0)

    # release cut: up to the registry tag, which nobody answers here
    push = tmp / "operator" / "registry" / f"{LANE}.json"
    push.parent.mkdir(parents=True)
    push.write_text(json.dumps({"lane": LANE, "registry": "127.0.0.1:1", "repo": f"sparkfleet/{LANE}",
                                "digest": "sha256:" + "cd" * 32, "image_id": IMAGE_ID}))  # fmt: skip
    with pytest.raises(SparkfleetError):  # refused (never promoted, not this image) or unreachable
        release.cut(root, LANE, "r1", Registry("127.0.0.1:1", tmp / "ca"))
    cut = release.releases_dir(root, LANE)
    assert not cut.exists() or not any(cut.iterdir())

    # rollback and promote act on what they read: strictly, so a bad record refuses them
    before = rec.read_bytes()
    stops: list[int] = []
    try:
        gens.rollback(root, LANE, stop=lambda: stops.append(1),
                      launch=lambda _inv: LaunchReport(LANE, [], None))  # fmt: skip
    except SparkfleetError as exc:
        assert not refused or rec.name in exc.message, exc.message
        assert stops == [] or not refused
    else:
        assert not refused
    try:
        gens.promote(root, LANE, True, smoke=lambda: (False, []),
                     bench_gate=lambda _since: (None, False, "", []))  # fmt: skip
    except SparkfleetError as exc:
        assert not refused or rec.name in exc.message, exc.message
    else:
        assert not refused
    if refused:
        assert rec.read_bytes() == before and gens.current(root, LANE) is None


@pytest.mark.surface("file:generation record", "cli:history", "cli:release cut")
@pytest.mark.parametrize("field", ["boot-cache-null", "image-ids-list"])
def test_the_two_records_that_crashed_history_and_release_cut_are_refused_naming_them(
    tmp_path, monkeypatch, figures, field
):
    """A boot of {"cache": null} (history's format string) and an `image_ids` list (release cut's
    `.values()`): both named as not valid generations, by history and by release cut, no traceback."""
    host = {"address": "localhost", "ssh_user": "root", "local_hub": str(tmp_path / "hub"),
            "nas_hub": str(tmp_path / "nas"), "state_dir": str(tmp_path / "state")}  # fmt: skip
    root = write_fleet(tmp_path / "fleet", {"spark": host}, {LANE: RECIPE})
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "operator"))
    gen = _record(root)
    if field == "boot-cache-null":
        gen["boot"] = {"cache": None}
    else:
        gen["image_ids"] = [IMAGE_ID]
    rec = gens.generations_dir(root, LANE) / f"{gen['id']}.json"
    rec.parent.mkdir(parents=True)
    rec.write_text(json.dumps(gen))
    runner = CliRunner()
    res = runner.invoke(cli, ["--root", str(root), "history", LANE])
    assert _clean(res) and res.exit_code == 0, res.output
    assert f"skipped (not a valid generation): {rec}" in res.stderr
    cut = runner.invoke(cli, ["--root", str(root), "release", "cut", LANE, "r1", "--registry", "127.0.0.1:1"])
    refused = _clean(cut) and cut.exit_code == 5 and rec.name in cut.output
    bad_input(figures, "generation-record", refused=refused)
    assert refused, cut.output
    assert not release.releases_dir(root, LANE).exists()
