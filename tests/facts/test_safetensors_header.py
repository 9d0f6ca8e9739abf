"""Reading tensor locations from safetensors headers, and refusing headers that lie."""

from __future__ import annotations

import json
import struct

import pytest

from sparkfleet.base.errors import SourceError
from sparkfleet.demo.hubfixture import tensors_file_bytes
from sparkfleet.facts.safetensors_header import read_header


def raw_file(header: dict, data: bytes) -> bytes:
    head = json.dumps(header).encode()
    return struct.pack("<Q", len(head)) + head + data


def test_offsets_point_at_the_tensor_bytes(tmp_path):
    a, b = bytes(range(24)), bytes(range(100, 164))
    path = tmp_path / "m.safetensors"
    path.write_bytes(tensors_file_bytes({"a": ("BF16", [3, 4], a), "t.weight": ("F8_E4M3", [8, 8], b)}))
    header = read_header(path)
    assert set(header.tensors) == {"a", "t.weight"}  # __metadata__ dropped
    t = header.tensors["t.weight"]
    assert (t.rows, t.row_bytes, t.nbytes) == (8, 8, 64)
    data = path.read_bytes()
    assert data[t.offset : t.offset + t.nbytes] == b
    assert data[t.row_offset(5) : t.row_offset(5) + 8] == b[40:48]
    assert header.tensors["a"].row_bytes == 8  # 4 BF16 values


@pytest.mark.parametrize(
    "header,data,message",
    [
        (
            {"x": {"dtype": "F4", "shape": [2, 2], "data_offsets": [0, 2]}},
            b"..",
            "cannot be cut into byte rows",
        ),
        ({"x": {"dtype": "U8", "shape": [2, 3], "data_offsets": [0, 5]}}, b"12345", "span 5 bytes but U8"),
        (
            {"x": {"dtype": "U8", "shape": [4, 4], "data_offsets": [0, 16]}},
            b"short",
            "truncated|data ends at",
        ),
        ({"x": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 0]}}, b"", "bad shape"),
        ({"x": {"dtype": "U8", "shape": [1], "data_offsets": [1, 0]}}, b"1", "bad data_offsets"),
    ],
)
def test_lying_headers_are_refused_naming_file_and_tensor(tmp_path, header, data, message):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(raw_file(header, data))
    with pytest.raises(SourceError, match=message) as exc:
        read_header(path, shown="repo@abc/bad.safetensors")
    assert "repo@abc/bad.safetensors: tensor 'x'" in exc.value.message


def test_not_safetensors_at_all(tmp_path):
    path = tmp_path / "x.safetensors"
    path.write_bytes(b"\xff" * 16)
    with pytest.raises(SourceError, match="bad safetensors header length"):
        read_header(path)
    path.write_bytes(b"abc")
    with pytest.raises(SourceError, match="no 8-byte header length"):
        read_header(path)
    path.write_bytes(struct.pack("<Q", 4) + b"nope")
    with pytest.raises(SourceError, match="not JSON"):
        read_header(path)


# ---- hostile headers ----------------------------------------------------------


def test_tensors_sharing_one_byte_range_are_refused(tmp_path):
    # 200 "attention" tensors on one 2 MiB range were once counted as 0.42 GB of weights.
    mib2 = 2 * 1024 * 1024
    header = {
        f"model.layers.{i}.self_attn.q_proj.weight": {
            "dtype": "BF16",
            "shape": [1024, 1024],
            "data_offsets": [0, mib2],
        }
        for i in range(200)
    }
    path = tmp_path / "shared.safetensors"
    path.write_bytes(raw_file(header, bytes(mib2)))
    with pytest.raises(SourceError, match="overlaps tensor") as exc:
        read_header(path, shown="repo@abc/shared.safetensors")
    assert "repo@abc/shared.safetensors" in exc.value.message


def test_a_partial_overlap_is_refused_and_adjacent_tensors_are_not(tmp_path):
    ok = {
        "a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
        "b": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]},
    }
    path = tmp_path / "m.safetensors"
    path.write_bytes(raw_file(ok, bytes(8)))
    assert set(read_header(path).tensors) == {"a", "b"}
    bad = {**ok, "b": {"dtype": "U8", "shape": [4], "data_offsets": [3, 7]}}
    path.write_bytes(raw_file(bad, bytes(8)))
    with pytest.raises(SourceError, match="'b' overlaps tensor 'a'"):
        read_header(path)


@pytest.mark.parametrize(
    "entry",
    [
        {"dtype": "U8", "shape": [0, 4], "data_offsets": [0, 0]},  # zero dimension
        {"dtype": "U8", "shape": [True, 4], "data_offsets": [0, 4]},  # true is not 1
        {"dtype": "U8", "shape": [4.0], "data_offsets": [0, 4]},
        {"dtype": "U8", "shape": [1], "data_offsets": [False, True]},
        {"dtype": "U8", "shape": [4], "data_offsets": [2**40, 2**40 + 4]},  # beyond the file
    ],
    ids=["zero-dim", "bool-dim", "float-dim", "bool-offsets", "out-of-file"],
)
def test_zero_boolean_and_out_of_file_entries_are_refused(tmp_path, entry):
    path = tmp_path / "x.safetensors"
    path.write_bytes(raw_file({"x": entry}, bytes(4)))
    with pytest.raises(SourceError, match="bad shape|bad data_offsets|data ends at") as exc:
        read_header(path, shown="f")
    assert "f: tensor 'x'" in exc.value.message


def test_a_deeply_nested_header_is_a_clean_error_not_a_recursion_traceback(tmp_path):
    head = b'{"x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    path = tmp_path / "deep.safetensors"
    path.write_bytes(struct.pack("<Q", len(head)) + head)
    with pytest.raises(SourceError, match="nested too deeply"):
        read_header(path, shown="deep")
