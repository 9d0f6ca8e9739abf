"""Where a tensor's bytes sit inside a .safetensors file, read from the header alone.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON
(`{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}`), then the data;
offsets are relative to the first byte after the header. Reading only the header lets the packer
address any row of a 100 GB table without mapping or loading it. Every promise the header makes is
checked against the file (offsets inside the file, sizes agree with dtype x shape, no two tensors
on the same bytes, every dimension a whole number > 0), because a row range computed from a lying
header would silently pack the wrong bytes.

Two rooms read it: the engram packer (row ranges) and the roofline model (bytes a token touches).
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import SourceError

# safetensors' own cap on the header (100 MB); anything larger is not a safetensors file.
MAX_HEADER_BYTES = 100 * 1000 * 1000

# Bytes per element. Sub-byte types (F4, F6_*) are left out on purpose: their rows are not
# byte-addressable in general, so a row range could not be cut by bytes.
DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "U16": 2,
    "I16": 2,
    "F16": 2,
    "BF16": 2,
    "U32": 4,
    "I32": 4,
    "F32": 4,
    "U64": 8,
    "I64": 8,
    "F64": 8,
}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's place in its file: absolute byte offset of its data and its row geometry."""

    name: str
    path: Path  # the file the bytes are read from (the resolved blob)
    dtype: str
    shape: tuple[int, ...]
    offset: int  # absolute offset of the first data byte in `path`
    nbytes: int

    @property
    def rows(self) -> int:
        """Rows along the first axis; a 0-d tensor is one row."""
        return self.shape[0] if self.shape else 1

    @property
    def row_bytes(self) -> int:
        """Bytes of one row: the product of the trailing dims times the element size."""
        return math.prod(self.shape[1:]) * DTYPE_BYTES[self.dtype]

    def row_offset(self, row: int) -> int:
        return self.offset + row * self.row_bytes


@dataclass(frozen=True)
class SafetensorsHeader:
    """A parsed header: every tensor of one file (metadata dropped)."""

    path: Path
    header_bytes: int
    file_size: int
    tensors: dict[str, TensorInfo]


def read_header(path: Path, shown: str | None = None) -> SafetensorsHeader:
    """Parse and check the header of `path`; `shown` is the name used in errors (the snapshot path)."""
    shown = shown or str(path)
    try:
        with open(path, "rb", buffering=0) as fh:
            size = os.fstat(fh.fileno()).st_size
            prefix = os.pread(fh.fileno(), 8, 0)
            if len(prefix) < 8:
                raise SourceError(f"{shown}: not a safetensors file ({size} bytes, no 8-byte header length)")
            (length,) = struct.unpack("<Q", prefix)
            if length == 0 or length > MAX_HEADER_BYTES or 8 + length > size:
                raise SourceError(
                    f"{shown}: bad safetensors header length {length} (file is {size} bytes)",
                    hint="the file is truncated or not safetensors; re-stage or re-download it",
                )
            raw = os.pread(fh.fileno(), length, 8)
    except OSError as exc:
        raise SourceError(f"cannot read {shown}: {exc.strerror or exc}") from None
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise SourceError(f"{shown}: safetensors header is not JSON: {exc}") from None
    except RecursionError:
        raise SourceError(f"{shown}: safetensors header is nested too deeply to be a header") from None
    if not isinstance(doc, dict):
        raise SourceError(f"{shown}: safetensors header is not a JSON object")
    data_start = 8 + length
    tensors = {}
    for name, entry in doc.items():
        if name == "__metadata__":
            continue
        tensors[name] = _tensor(name, entry, path, shown, data_start, size)
    _check_disjoint(tensors, shown)
    return SafetensorsHeader(path, length, size, tensors)


def _check_disjoint(tensors: dict[str, TensorInfo], shown: str) -> None:
    """Refuse two tensors claiming the same bytes (200 tensors on one 2 MiB range once counted 0.42 GB)."""
    spans = sorted((t.offset, t.offset + t.nbytes, t.name) for t in tensors.values())
    for (_, end, before), (begin, _, name) in zip(spans, spans[1:], strict=False):
        if begin < end:
            raise SourceError(
                f"{shown}: tensor {name!r} overlaps tensor {before!r} (bytes from {begin} are claimed twice)",
                hint="the header lies about where its tensors are; re-download the file",
            )


def _whole(value: object) -> bool:
    """A JSON integer; `true` is not 1 here."""
    return isinstance(value, int) and not isinstance(value, bool)


def _tensor(name: str, entry: object, path: Path, shown: str, data_start: int, size: int) -> TensorInfo:
    where = f"{shown}: tensor {name!r}"
    if not isinstance(entry, dict):
        raise SourceError(f"{where}: header entry is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in DTYPE_BYTES:
        raise SourceError(
            f"{where}: dtype {dtype!r} cannot be cut into byte rows",
            hint=f"supported: {', '.join(sorted(DTYPE_BYTES))}",
        )
    if not isinstance(shape, list) or not all(_whole(d) and d > 0 for d in shape):
        raise SourceError(f"{where}: bad shape {shape!r} (dimensions must be whole numbers > 0)")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_whole(o) and o >= 0 for o in offsets)
        or offsets[0] > offsets[1]
    ):
        raise SourceError(f"{where}: bad data_offsets {offsets!r}")
    nbytes = math.prod(shape) * DTYPE_BYTES[dtype]
    if offsets[1] - offsets[0] != nbytes:
        raise SourceError(
            f"{where}: data_offsets {offsets} span {offsets[1] - offsets[0]} bytes but {dtype} x {shape} "
            f"is {nbytes}"
        )
    if data_start + offsets[1] > size:
        raise SourceError(
            f"{where}: data ends at byte {data_start + offsets[1]} but the file has {size}",
            hint="the shard is truncated; re-stage it (sparkfleet stage) or fix it on the NAS",
        )
    return TensorInfo(name, path, dtype, tuple(shape), data_start + offsets[0], nbytes)
