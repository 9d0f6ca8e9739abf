"""Memory facts of one node and the admission rule a lane must pass before any container starts.

Why: a Spark's GPU and CPU share one pool of memory. When a lane asks for more than the pool
has, the host does not fail a malloc; it stalls and needs a power cycle (eugr/spark-vllm-docker
#257, NVIDIA dgx-spark-playbooks #97). So the launch reads each node's /proc/meminfo and /dev/shm
first and refuses, with the numbers, a lane whose declared need does not fit above a floor.

Read through plain files (`/proc/meminfo`, statvfs of the shm directory), so tests and the
watchdog point at a file they control. Pure once read: `admit` only compares numbers.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

KIB = 1024
MIB = 1024**2
GIB = 1024**3
# coolbho3k's 2x kit stops its lane when free memory falls under 512 MiB.
DEFAULT_FLOOR_BYTES = 512 * MIB
_SIZE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([bkmgt]?)(?:i?b)?$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Docker-style sizes ("32g", "512m", "1024") in bytes; units are powers of 1024."""
    m = _SIZE.match(text.strip())
    if not m:
        raise ValueError(f"not a size: {text!r} (expected e.g. 32g, 512m)")
    scale = {"": 1, "b": 1, "k": KIB, "m": MIB, "g": GIB, "t": 1024**4}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


@dataclass(frozen=True)
class MemoryFacts:
    """What a node's memory looks like right now (bytes)."""

    total: int
    available: int
    swap_total: int
    swap_free: int
    shm_path: str
    shm_total: int | None  # None: no shm mount at that path
    shm_free: int | None

    @property
    def swap_used(self) -> int:
        return max(0, self.swap_total - self.swap_free)


def read_meminfo(path: Path | str = "/proc/meminfo") -> dict[str, int]:
    """/proc/meminfo as bytes by key ("MemAvailable": ...)."""
    out: dict[str, int] = {}
    for line in Path(path).read_text().splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if not parts:
            continue
        try:
            value = int(parts[0])
        except ValueError:
            continue
        out[key.strip()] = value * KIB if len(parts) > 1 and parts[1].lower() == "kb" else value
    return out


def read_memory(meminfo: Path | str = "/proc/meminfo", shm: Path | str = "/dev/shm") -> MemoryFacts:
    """The node's memory facts from its meminfo file and its shm mount."""
    info = read_meminfo(meminfo)
    if "MemAvailable" not in info or "MemTotal" not in info:
        raise ValueError(f"{meminfo}: no MemTotal/MemAvailable lines")
    try:
        st = os.statvfs(shm)
        shm_total, shm_free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    except OSError:
        shm_total = shm_free = None
    return MemoryFacts(
        total=info["MemTotal"],
        available=info["MemAvailable"],
        swap_total=info.get("SwapTotal", 0),
        swap_free=info.get("SwapFree", 0),
        shm_path=str(shm),
        shm_total=shm_total,
        shm_free=shm_free,
    )


@dataclass(frozen=True)
class MemoryNeed:
    """A lane's declared per-rank need ([launch.memory] in its recipe)."""

    weights_per_rank: int = 0
    kv_budget: int = 0
    mem_fraction: float | None = None  # the share of MemTotal the engine claims (SGLang/vLLM flag)
    shm: int = 0  # the lane's shm_size: with --ipc host the ranks use the host's /dev/shm
    floor: int = DEFAULT_FLOOR_BYTES
    max_swap_used: int | None = None
    interval_s: float = 2.0  # how often the watchdog reads the node's memory

    def claim(self, total: int) -> int:
        """What the rank will take: weights + KV, or the engine's static fraction if that is larger."""
        own = self.weights_per_rank + self.kv_budget
        return max(own, int(self.mem_fraction * total)) if self.mem_fraction else own


def admit(host: str, need: MemoryNeed, facts: MemoryFacts) -> list[str]:
    """Every reason the rank cannot start on `host`, each with the numbers (empty: it fits)."""
    problems = []
    own = need.weights_per_rank + need.kv_budget
    if need.mem_fraction:
        share = int(need.mem_fraction * facts.total)
        if own > share:
            problems.append(
                f"{host}: weights {gib(need.weights_per_rank)} + KV {gib(need.kv_budget)} = {gib(own)} "
                f"do not fit in mem fraction {need.mem_fraction:g} of {gib(facts.total)} = {gib(share)}"
            )
    claim = need.claim(facts.total)
    if claim + need.floor > facts.available:
        parts = f"weights {gib(need.weights_per_rank)} + KV {gib(need.kv_budget)}"
        if need.mem_fraction and claim > own:
            parts = f"mem fraction {need.mem_fraction:g} x {gib(facts.total)}"
        problems.append(
            f"{host}: needs {gib(claim)} ({parts}) + floor {gib(need.floor)}, "
            f"but MemAvailable is {gib(facts.available)} of {gib(facts.total)}"
        )
    if need.shm:
        if facts.shm_total is None:
            problems.append(f"{host}: no shm mount at {facts.shm_path}; the lane wants {gib(need.shm)}")
        elif facts.shm_total < need.shm:
            problems.append(
                f"{host}: {facts.shm_path} is {gib(facts.shm_total)}, the lane's shm_size is {gib(need.shm)}"
            )
    if need.max_swap_used is not None and facts.swap_used > need.max_swap_used:
        problems.append(
            f"{host}: {gib(facts.swap_used)} of swap in use (limit {gib(need.max_swap_used)}): "
            "the host is already short of memory"
        )
    return problems


def summary(facts: MemoryFacts) -> str:
    shm = f"{gib(facts.shm_total)}" if facts.shm_total is not None else "none"
    return (
        f"MemAvailable {gib(facts.available)} of {gib(facts.total)}, swap used {gib(facts.swap_used)} "
        f"of {gib(facts.swap_total)}, {facts.shm_path} {shm}"
    )
