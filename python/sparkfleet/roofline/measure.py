"""Short measurements of a host's primitives, run on the host itself.

Each probe is bounded in bytes and time (a few hundred MiB, a second or two) so `sparkfleet measure
HOST` and staging's own bound cost little. Reads drop the file's pages from the page cache first
(posix_fadvise DONTNEED — on NFS and FUSE too, where it drops the client's cache) so a rate is the
device's or the link's, not memory's; writes are fsync'd, as staging's are. The GPU probes run
only where torch sees a CUDA device (the fleet); elsewhere the CPU copy rate is recorded under its
own name and never stands in for the GPU's bandwidth.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

CHUNK = 8 * 1024 * 1024
READ_LIMIT = 512 * 1024 * 1024
WRITE_BYTES = 256 * 1024 * 1024
MIN_BYTES = 1024 * 1024  # below this a rate is mostly syscall noise


@dataclass(frozen=True)
class Rate:
    """Bytes moved in seconds; `value` in bytes/s."""

    nbytes: int
    seconds: float
    method: str

    @property
    def value(self) -> float:
        return self.nbytes / self.seconds if self.seconds > 0 else 0.0


def _drop_cache(fd: int) -> None:
    # A filesystem without fadvise: the rate may include cached pages.
    with contextlib.suppress(OSError):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def largest_files(roots: Iterable[Path], limit: int = 16) -> list[Path]:
    """The largest regular files under `roots` (blobs of staged repos), largest first."""
    found = []
    for root in roots:
        for dirpath, _, names in os.walk(root):
            for name in names:
                path = Path(dirpath) / name
                try:
                    st = path.lstat()
                except OSError:
                    continue
                if path.is_file() and not path.is_symlink() and st.st_size >= 64 * 1024:
                    found.append((st.st_size, path))
    return [p for _, p in sorted(found, reverse=True)[:limit]]


def _read_files(files: list[Path], limit: int) -> int:
    """Read up to `limit` bytes from `files` in order, each file's cached pages dropped first."""
    total = 0
    buf = memoryview(bytearray(CHUNK))
    for path in files:
        if total >= limit:
            break
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            _drop_cache(fd)
            while total < limit:
                n = os.readv(fd, [buf[: min(CHUNK, limit - total)]])
                if not n:
                    break
                total += n
        finally:
            os.close(fd)
    return total


def read_rate(
    files: Iterable[Path], limit: int = READ_LIMIT, label: str = "read", streams: int = 1
) -> Rate | None:
    """Read up to `limit` bytes over `files` in `streams` parallel readers (as staging reads)."""
    files = list(files)
    groups = [files[i::streams] for i in range(streams)] if streams > 1 else [files]
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(groups)) as pool:
        total = sum(pool.map(lambda g: _read_files(g, limit // len(groups)), groups))
    seconds = time.perf_counter() - start
    if total < MIN_BYTES:
        return None
    return Rate(
        total, seconds, f"{label}: {total >> 20} MiB in {len(groups)} stream(s), page cache dropped first"
    )


def _write_file(path: Path, nbytes: int, block: bytes) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        written = 0
        while written < nbytes:
            written += os.write(fd, block[: min(CHUNK, nbytes - written)])
        os.fsync(fd)
        return written
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)


def write_rate(directory: Path, nbytes: int = WRITE_BYTES, label: str = "write", streams: int = 1) -> Rate:
    """Write `nbytes` in `streams` temp files in `directory`, fsync each, remove: staging's write rate."""
    directory.mkdir(parents=True, exist_ok=True)
    block = os.urandom(CHUNK)  # incompressible, so a compressing filesystem cannot flatter the rate
    paths = [directory / f".sparkfleet-measure-{os.getpid()}-{i}.tmp" for i in range(streams)]
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=streams) as pool:
        written = sum(pool.map(lambda p: _write_file(p, nbytes // streams, block), paths))
    seconds = time.perf_counter() - start
    return Rate(written, seconds, f"{label}: {written >> 20} MiB in {streams} stream(s), each fsync'd")


def cpu_copy_rate(nbytes: int = 256 * 1024 * 1024, repeats: int = 3) -> Rate:
    """Best of `repeats` numpy copies of an `nbytes` array (read + write = 2 x nbytes moved)."""
    import numpy as np  # numpy is a runtime dependency (engram packs)

    src = np.ones(nbytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return Rate(2 * src.nbytes, best, "numpy copy (CPU), read + write counted")


def gpu_rates() -> dict[str, Rate]:
    """Device memory bandwidth and dense BF16 matmul rate, where torch sees a CUDA device."""
    try:
        import torch  # present in the lanes' images, not a sparkfleet dependency
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    out = {}
    n = 1 << 28  # 512 MiB of bf16
    a = torch.empty(n, dtype=torch.bfloat16, device="cuda")
    b = torch.empty_like(a)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(5):
        b.copy_(a)
    torch.cuda.synchronize()
    out["memory_bandwidth"] = Rate(5 * 2 * a.numel() * 2, time.perf_counter() - start, "torch.cuda copy")
    m = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(10):
        m @ m
    torch.cuda.synchronize()
    out["peak_bf16"] = Rate(10 * 2 * 8192**3, time.perf_counter() - start, "torch.cuda bf16 matmul 8192^3")
    return out
