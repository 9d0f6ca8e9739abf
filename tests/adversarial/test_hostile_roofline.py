"""Property: tampered measurements, configs and safetensors headers never become a figure or a traceback.

- measurements.json: any JSON value as a measured figure either passes the one vetting path
  (a finite real number, not a bool, 25-150 % of the kind's declared figure) and is used, or the
  declared figure is used and a warning says why (a measurement file is anyone's to edit);
- config.json: any value for a dimension either is refused naming the key, or gives a cost whose
  figures are finite and positive (a checkpoint's config is the publisher's);
- a safetensors header with any offsets and shapes either is refused cleanly, or every tensor it
  describes lies inside the file and no two share a byte.
"""

from __future__ import annotations

import json
import math
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkfleet.base.errors import SourceError
from sparkfleet.demo.synthmodel import SynthSpec, checkpoint_files
from sparkfleet.facts.safetensors_header import read_header
from sparkfleet.fleet import inventory
from sparkfleet.roofline.machine import PLAUSIBLE_HIGH, PLAUSIBLE_LOW, machine_figures
from sparkfleet.roofline.model import CostOptions, model_cost, snapshot_files

from .tally import bad_input, count

pytestmark = pytest.mark.slow

FLEET = """schema_version = 1
[defaults]
ssh_user = "u"
local_hub = "/l"
nas_hub = "/n"
kind = "gb10"
[hosts.a]
address = "a"
[host_kinds.gb10]
description = "test kind"
memory_bandwidth = { value = 273, unit = "GB/s", source = "vendor sheet" }
"""
DECLARED = 273e9

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
near_declared = st.floats(min_value=DECLARED * 0.01, max_value=DECLARED * 3)


def _real(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@pytest.mark.surface("file:measurements")
@given(value=json_values | near_declared)
def test_a_tampered_measurement_is_used_only_when_it_passes(tmp_path_factory, figures, value) -> None:
    root = tmp_path_factory.mktemp("fleet")
    (root / "hosts").mkdir()
    (root / "hosts" / "fleet.toml").write_text(FLEET)
    inv = inventory.load(root)
    raw = json.loads(json.dumps({"memory_bandwidth": {"value": value, "method": "planted"}}))
    prim = machine_figures(inv, inv.host("a"), raw).primitives["memory_bandwidth"]
    # the oracle: not a finite real number, or outside 25-150 % of the declared figure
    known_bad = not (_real(value) and math.isfinite(value) and 0.25 <= value / DECLARED <= 1.5)
    count(figures, "measurements", "values_tried")
    if known_bad:
        bad_input(figures, "measurements", refused=prim.origin != "measured")
    if prim.origin == "measured":
        assert isinstance(value, int | float) and not isinstance(value, bool)
        assert math.isfinite(value) and PLAUSIBLE_LOW <= value / DECLARED <= PLAUSIBLE_HIGH
        assert prim.value == value and prim.warning is None
    else:
        assert (prim.value, prim.origin) == (DECLARED, "declared")
        assert prim.warning and "memory_bandwidth" in prim.warning


DIMENSIONS = [
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
    "num_experts_per_tok", "n_routed_experts", "kv_lora_rank", "head_dim", "index_topk",
]  # fmt: skip
dimension_values = (
    st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.booleans()
    | st.text(max_size=4)
)


@pytest.mark.surface("file:checkpoint config.json")
@given(key=st.sampled_from(DIMENSIONS), value=dimension_values)
def test_a_tampered_config_is_refused_naming_the_key_or_costs_sanely(tmp_path_factory, figures, key, value):
    snap = tmp_path_factory.mktemp("snap")
    for name, data in checkpoint_files(SynthSpec(experts=8, top_k=2)).items():
        (snap / name).write_bytes(data)
    config = json.loads((snap / "config.json").read_text())
    config[key] = value
    (snap / "config.json").write_text(json.dumps(config))
    # the oracle: a dimension that is not a positive whole number (bools, text, NaN, 0, negatives)
    known_bad = not _real(value) or not math.isfinite(value) or value <= 0 or value != int(value)
    count(figures, "model-config", "values_tried")
    try:
        config, files = snapshot_files(snap)
    except SourceError as exc:
        if known_bad:
            bad_input(figures, "model-config", refused=True)
        assert key in exc.message
        return
    if known_bad:
        bad_input(figures, "model-config", refused=False)
    cost = model_cost("x", config, files, CostOptions())
    assert cost.step_weight_bytes(1) > 0
    assert cost.kv_bytes_per_token is None or 0 < cost.kv_bytes_per_token < 2**50
    flops = cost.flops_per_token(1024)
    assert flops is None or (math.isfinite(flops) and flops > 0)


entries = st.fixed_dictionaries(
    {
        "dtype": st.sampled_from(["U8", "BF16", "F32", "BOOL"]),
        "shape": st.lists(st.integers(min_value=-1, max_value=9) | st.booleans(), max_size=3),
        "data_offsets": st.lists(
            st.integers(min_value=0, max_value=80) | st.booleans(), min_size=2, max_size=2
        ),
    }
)


@pytest.mark.surface("file:safetensors header")
@given(
    header=st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), entries, min_size=1),
    data=st.binary(max_size=64),
)
def test_a_hostile_header_is_refused_or_describes_disjoint_bytes_inside_the_file(
    tmp_path_factory, figures, header, data
):
    head = json.dumps(header).encode()
    path = tmp_path_factory.mktemp("st") / "x.safetensors"
    path.write_bytes(struct.pack("<Q", len(head)) + head + data)
    # the oracle: a bool or a dimension under 1 anywhere, or a byte range that ends before it begins
    known_bad = any(
        any(type(d) is bool or d < 1 for d in e["shape"])
        or any(type(o) is bool for o in e["data_offsets"])
        or e["data_offsets"][1] < e["data_offsets"][0]
        for e in header.values()
    )
    count(figures, "safetensors-header", "headers_tried")
    try:
        parsed = read_header(path)
    except SourceError:
        if known_bad:
            bad_input(figures, "safetensors-header", refused=True)
        return
    if known_bad:
        bad_input(figures, "safetensors-header", refused=False)
    spans = sorted((t.offset, t.offset + t.nbytes) for t in parsed.tensors.values())
    for begin, end in spans:
        assert 8 + len(head) <= begin < end <= parsed.file_size
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
    for t in parsed.tensors.values():
        assert all(type(d) is int and d > 0 for d in t.shape)
