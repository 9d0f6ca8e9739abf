"""Short measurements of a host's primitives, run on the host itself.

Each probe is bounded in bytes and time (a few hundred MiB, a second or two) so `sparkfleet measure
HOST` and staging's own bound cost little. Reads drop the file's pages from the page cache first
(posix_fadvise DONTNEED — on NFS and FUSE too, where it drops the client's cache) so a rate is the
device's or the link's, not memory's; writes are fsync'd, as staging's are. The GPU probes run
only where torch sees a CUDA device (the fleet); elsewhere the CPU copy rate is recorded under its
own name and never stands in for the GPU's bandwidth. The GPU probes warm up, time with CUDA
events and keep the best of several trials (`timing.py`): a cold first kernel reads ~10x slow.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .timing import ITERATIONS, TRIALS, WARMUPS, CudaEventClock, Trials, WallClock, time_trials

CHUNK = 8 * 1024 * 1024
READ_LIMIT = 512 * 1024 * 1024
WRITE_BYTES = 256 * 1024 * 1024
MIN_BYTES = 1024 * 1024  # below this a rate is mostly syscall noise
COPY_ALIGN = 64 * 1024 * 1024
COPY_MIN = 64 * 1024 * 1024
COPY_MAX = 4 * 1024 * 1024 * 1024  # 8 GiB moved per copy: ~2 ms on an H200, ~30 ms on a GB10
MATMUL_SIDE = 8192


@dataclass(frozen=True)
class Rate:
    """Work (bytes, or FLOPs for a matmul) done in seconds; `value` in units/s."""

    nbytes: int
    seconds: float
    method: str
    spread: float | None = None  # (worst - best) / best over the trials, where repeated

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


def cpu_copy_rate(nbytes: int = 256 * 1024 * 1024, trials: int = 3) -> Rate:
    """Best of `trials` numpy copies of an `nbytes` array (read + write = 2 x nbytes moved)."""
    import numpy as np  # numpy is a runtime dependency (engram packs)

    src = np.ones(nbytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    timed = time_trials(lambda: np.copyto(dst, src), WallClock(), 1, 1, trials, min_warmup_s=0.0)
    return Rate(2 * src.nbytes, timed.best_s, "numpy copy (CPU), read + write counted", timed.spread)


def copy_probe_bytes(free_bytes: int) -> int:
    """The device-copy buffer for `free_bytes` of free device memory: a quarter of it, 64 MiB to 4 GiB.

    Two buffers of this size must fit with room to spare, and the buffer must be far larger than
    any cache (an H200's L2 is 60 MB) so the copy streams from memory.
    """
    quarter = (free_bytes // 4) // COPY_ALIGN * COPY_ALIGN
    return max(COPY_MIN, min(COPY_MAX, quarter))


def matmul_probe_side(free_bytes: int) -> int:
    """The largest square side (8192 down to 1024) whose three bf16 matrices take under a quarter of free."""
    side = MATMUL_SIDE
    while side > 1024 and 3 * side * side * 2 > free_bytes // 4:
        side //= 2
    return side


def gpu_rates(warmups: int = WARMUPS, iterations: int = ITERATIONS, trials: int = TRIALS) -> dict[str, Rate]:
    """Device memory bandwidth and dense BF16 matmul rate, where torch sees a CUDA device.

    Timed with CUDA events after warm-ups (the first copy and matmul pay for cuBLAS and module
    loading), best of several trials, probes sized to the device's free memory.
    """
    try:
        import torch  # present in the lanes' images, not a sparkfleet dependency
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    free, _ = torch.cuda.mem_get_info()
    clock = CudaEventClock(torch)
    nbytes = copy_probe_bytes(free)
    copy = _copy_trials(torch, nbytes, clock, warmups, iterations, trials)
    torch.cuda.empty_cache()
    n = matmul_probe_side(free)
    mm = _matmul_trials(torch, n, clock, warmups, iterations, trials)
    torch.cuda.empty_cache()
    return {
        "memory_bandwidth": Rate(
            2 * nbytes, copy.best_s,
            f"torch.cuda device copy of {nbytes >> 20} MiB, read + write counted, CUDA events, "
            + copy.describe(),
            copy.spread,
        ),
        "peak_bf16": Rate(
            2 * n**3, mm.best_s,
            f"torch.cuda bf16 matmul {n}^3 on random data, CUDA events, " + mm.describe(),
            mm.spread,
        ),
    }  # fmt: skip


def _copy_trials(torch, nbytes: int, clock, warmups: int, iterations: int, trials: int) -> Trials:
    """Device-to-device copies of an `nbytes` bf16 buffer (its buffers freed on return)."""
    a = torch.zeros(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    b = torch.empty_like(a)
    return time_trials(lambda: b.copy_(a), clock, warmups, iterations, trials)


def _matmul_trials(torch, n: int, clock, warmups: int, iterations: int, trials: int) -> Trials:
    """`n`^3 bf16 matmuls on random data (zeros run faster: less switching in the tensor cores)."""
    x = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    y = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    return time_trials(lambda: x @ y, clock, warmups, iterations, trials)
