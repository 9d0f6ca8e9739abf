"""What stack a host really runs (kernel, driver, CUDA, NCCL, firmware, clocks), and drift from the pin.

Why: a kernel update (7.0.0-1019) silently broke NCCL on Sparks (MiaAI-Lab #14,
eugr/spark-vllm-docker #392); nothing failed until the serve hung. So fleet.toml declares the
known-good stack ([defaults.stack] fleet-wide, [hosts.X.stack] per host), every host's actual
stack is read here, `doctor` names the difference and `launch` refuses it unless --allow-drift.
Bench reports and lane generations carry the fingerprint, so a number is never separated from
the stack it was measured on.

Every fact is read with an ordinary tool through a HostRunner (argv lists, no shell): `uname -r`,
`nvidia-smi`, /proc/meminfo, /sys/class/infiniband/*/fw_ver (else `ibstat`), the image's env
(NVIDIA images set NCCL_VERSION) and ID from docker/podman. A missing tool gives None, never a crash.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .hosts import HostRunner, RunResult, fan_out

STACK_KEYS = ("kernel", "driver", "cuda", "nccl", "firmware")
ENGINES = ("docker", "podman")
_CUDA = re.compile(r"CUDA Version:\s*([0-9.]+)")
_HCA = re.compile(r"^[A-Za-z0-9_.-]+$")
_IBSTAT_FW = re.compile(r"Firmware version:\s*(\S+)")


@dataclass(frozen=True)
class HostFingerprint:
    """One host's stack as read right now; None where the host has no tool to tell."""

    host: str
    kernel: str | None = None
    driver: str | None = None
    cuda: str | None = None
    nccl: str | None = None
    firmware: str | None = None
    gpu_clocks: str | None = None
    power_mode: str | None = None
    mem_available_bytes: int | None = None
    image_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HostFingerprint:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def _run(runner: HostRunner, argv: list[str], timeout: float = 30) -> RunResult | None:
    """The command's result when it ran and succeeded; None for a missing tool or a failure."""
    try:
        res = runner.run(argv, timeout=timeout)
    except OSError:
        return None
    return res if res.returncode == 0 else None


def _first_line(res: RunResult | None) -> str | None:
    if res is None:
        return None
    lines = [ln.strip() for ln in res.stdout.splitlines() if ln.strip()]
    return lines[0] if lines else None


def _na(value: str) -> str | None:
    v = value.strip()
    return None if not v or v.startswith("[") or v.upper() in ("N/A", "[N/A]") else v


def read_gpu(runner: HostRunner) -> dict[str, str | None]:
    """driver, cuda, gpu_clocks, power_mode from nvidia-smi (all None without it)."""
    out: dict[str, str | None] = {"driver": None, "cuda": None, "gpu_clocks": None, "power_mode": None}
    q = _first_line(
        _run(
            runner,
            [
                "nvidia-smi",
                "--query-gpu=driver_version,clocks.max.sm,clocks.max.mem,power.limit",
                "--format=csv,noheader",
            ],
        )  # fmt: skip
    )
    if q:
        fields = [_na(f) for f in q.split(",")] + [None] * 4
        out["driver"] = fields[0]
        clocks = [f"sm {fields[1]}" if fields[1] else None, f"mem {fields[2]}" if fields[2] else None]
        out["gpu_clocks"] = ", ".join(c for c in clocks if c) or None
        out["power_mode"] = f"power limit {fields[3]}" if fields[3] else None
    banner = _run(runner, ["nvidia-smi"])
    m = _CUDA.search(banner.stdout) if banner else None
    out["cuda"] = m.group(1) if m else None
    return out


def read_firmware(runner: HostRunner) -> str | None:
    """ConnectX firmware: one version when every HCA agrees, else `hca=version` pairs."""
    listing = _run(runner, ["ls", "-1", "/sys/class/infiniband"])
    versions: dict[str, str] = {}
    for hca in listing.stdout.split() if listing else []:
        if not _HCA.match(hca):
            continue
        v = _first_line(_run(runner, ["cat", f"/sys/class/infiniband/{hca}/fw_ver"]))
        if v:
            versions[hca] = v
    if not versions:
        ib = _run(runner, ["ibstat"])
        found = _IBSTAT_FW.findall(ib.stdout) if ib else []
        versions = {f"ca{i}": v for i, v in enumerate(found)}
    if not versions:
        return None
    if len(set(versions.values())) == 1:
        return next(iter(versions.values()))
    return ",".join(f"{h}={v}" for h, v in sorted(versions.items()))


def read_mem_available(runner: HostRunner) -> int | None:
    res = _run(runner, ["cat", "/proc/meminfo"])
    for line in res.stdout.splitlines() if res else []:
        if line.startswith("MemAvailable:"):
            parts = line.split()
            return int(parts[1]) * 1024 if len(parts) > 1 and parts[1].isdigit() else None
    return None


def read_image(runner: HostRunner, image: str) -> tuple[str | None, str | None]:
    """(image ID, NCCL_VERSION from the image's env) from the first engine that knows the image."""
    for engine in ENGINES:
        res = _run(runner, [engine, "image", "inspect", "--format", "{{.Id}} {{json .Config.Env}}", image])
        if res is None:
            continue
        ident, _, env_json = res.stdout.strip().partition(" ")
        nccl = None
        m = re.search(r'"NCCL_VERSION=([^"]+)"', env_json)
        if m:
            nccl = m.group(1)
        return ident or None, nccl
    return None, None


def collect_fingerprint(runner: HostRunner, image: str | None) -> HostFingerprint:
    """Read `runner`'s host stack (and `image`'s ID and NCCL when given). Never raises for a missing tool."""
    gpu = read_gpu(runner)
    image_id = nccl = None
    if image:
        image_id, nccl = read_image(runner, image)
    if nccl is None:  # a bare-metal NCCL install (or the node's profile) says so in its env
        nccl = _first_line(_run(runner, ["printenv", "NCCL_VERSION"]))
    return HostFingerprint(
        host=runner.name,
        kernel=_first_line(_run(runner, ["uname", "-r"])),
        driver=gpu["driver"],
        cuda=gpu["cuda"],
        nccl=nccl,
        firmware=read_firmware(runner),
        gpu_clocks=gpu["gpu_clocks"],
        power_mode=gpu["power_mode"],
        mem_available_bytes=read_mem_available(runner),
        image_id=image_id,
    )


# ---- declared stack and drift -------------------------------------------------------------------


@dataclass(frozen=True)
class Drift:
    """One stack fact that differs from what fleet.toml declares for the host."""

    host: str
    key: str
    declared: str
    actual: str | None

    def __str__(self) -> str:
        got = self.actual if self.actual is not None else "unknown (could not be read)"
        return f"{self.host}: {self.key} is {got}, declared {self.declared}"


def drift(declared: dict[str, str], fp: HostFingerprint) -> list[Drift]:
    """Every declared key the fingerprint does not match (a declared value may be a glob: 580.*)."""
    out = []
    for key in STACK_KEYS:
        want = declared.get(key)
        if want is None:
            continue
        actual = getattr(fp, key)
        if actual is None or not fnmatch.fnmatchcase(actual, want):
            out.append(Drift(fp.host, key, want, actual))
    return out


def fingerprint_hosts(
    hosts: Sequence[str], collect_one: Callable[[str], Any], workers: int = 8
) -> dict[str, dict[str, Any]]:
    """{host: fingerprint dict} for `hosts`, collected in parallel; never raises for one host.

    A host that cannot be fingerprinted is recorded with its error; `report compare` treats such
    an entry as unknown, never as "the same". A fingerprint with no fact at all (every tool
    missing, or the host unreachable: a failed command reads as "no tool") is such an entry too —
    two unreachable hosts must not compare as two identical stacks.
    """
    def one(host: str) -> dict[str, Any]:
        try:
            fp = collect_one(host)
            facts = fp.to_dict() if hasattr(fp, "to_dict") else dict(fp)
        except Exception as exc:  # noqa: BLE001 - any failure on one host is recorded, the run goes on
            return {"host": host, "error": getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"}
        if all(v is None for k, v in facts.items() if k != "host"):
            facts = {**facts, "error": "no stack fact could be read (host unreachable, or no tools)"}
        return facts

    hosts = list(hosts)
    return dict(zip(hosts, fan_out(one, hosts, limit=workers), strict=True))
