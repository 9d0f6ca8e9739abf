"""Which rows a rank owns, and the on-disk layout of a pack (DSV41EN1).

Rank r of W owns rows [floor(r*R/W), floor((r+1)*R/W)): contiguous, disjoint, covering [0, R)
for any R and W, with sizes differing by at most one row — the same split the TP4 lane's own
packer and runtime use, so a pack we write is the pack the runtime expects.

A pack file is a 4,096-byte header (little-endian u64: magic "DSV41EN1", layer, lo, hi, total
rows, row bytes; the rest zero, which keeps row 0 page-aligned) followed by rows lo .. hi-1.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

MAGIC = int.from_bytes(b"DSV41EN1", "little")
HEADER_BYTES = 4096
_FIELDS = struct.Struct("<6Q")


def rank_range(total_rows: int, rank: int, world: int) -> tuple[int, int]:
    """[lo, hi) of rank `rank` in a world of `world` over `total_rows` rows."""
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not in a world of {world}")
    if total_rows < 0:
        raise ValueError(f"negative row count {total_rows}")
    return total_rows * rank // world, total_rows * (rank + 1) // world


_PACK_NAME = re.compile(r"engram-l[0-9]{1,9}-r[0-9]{1,9}of[0-9]{1,9}\.bin")


def is_pack_name(name: str) -> bool:
    """Whether `name` is a bare pack file name (no directory, no `..`): all a receipt may name."""
    return _PACK_NAME.fullmatch(name) is not None


def pack_name(layer: int, rank: int, world: int) -> str:
    return f"engram-l{layer}-r{rank}of{world}.bin"


@dataclass(frozen=True)
class PackHeader:
    """The header fields of one pack file."""

    layer: int
    lo: int
    hi: int
    total_rows: int
    row_bytes: int

    @property
    def file_size(self) -> int:
        return HEADER_BYTES + (self.hi - self.lo) * self.row_bytes

    def encode(self) -> bytes:
        head = _FIELDS.pack(MAGIC, self.layer, self.lo, self.hi, self.total_rows, self.row_bytes)
        return head + bytes(HEADER_BYTES - len(head))

    @classmethod
    def decode(cls, data: bytes) -> PackHeader | None:
        """The header of `data` (the first bytes of a file), or None if it is not a DSV41EN1 header."""
        if len(data) < _FIELDS.size:
            return None
        magic, layer, lo, hi, total, row_bytes = _FIELDS.unpack_from(data)
        if magic != MAGIC:
            return None
        return cls(layer, lo, hi, total, row_bytes)
