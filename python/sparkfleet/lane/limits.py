"""A container's limits and privileges, as a recipe declares them ([launch.container]).

Why a table of its own: a kit may run its server boxed in (the EXL3 kit's portable_node.py runs
each node with --memory=9g, --cpus=6, --read-only, --cap-drop=ALL, --user, --ipc=private ...),
and a lane that claims to run "the kit's way" must run with the same box, or a leak the kit's
limit would have stopped takes the whole Spark instead. Left out, a container keeps what sparkfleet
always gave it (--ipc host, the engine's defaults). Pure: the runtime renders these flags into its
argv list (runtimes.container_run_argv); nothing here runs anything.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..base.errors import InventoryError
from ..facts.memory import parse_size

HOST_USER = "host"  # user = "host": the uid:gid sparkfleet runs as on the node (the kit's os.getuid())


@dataclass(frozen=True)
class ContainerLimits:
    """[launch.container]: each field is one `docker|podman run` flag; None/() leaves it out."""

    ipc: str = "host"
    cgroupns: str | None = None
    oci_runtime: str | None = None
    pull: str | None = None
    restart: str | None = None
    memory: str | None = None
    memory_swap: str | None = None
    cpus: float | None = None
    pids_limit: int | None = None
    read_only: bool = False
    cap_drop: tuple[str, ...] = ()
    cap_add: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()
    tmpfs: tuple[str, ...] = ()
    workdir: str | None = None
    user: str | None = None

    @classmethod
    def from_dict(cls, d: dict) -> ContainerLimits:
        """ContainerLimits from its JSON form (the spec the controller sends the node's agent)."""
        lists = ("cap_drop", "cap_add", "security_opt", "tmpfs")
        return cls(**{k: tuple(v) if k in lists else v for k, v in d.items()})


def container_limits(doc: dict, where: str) -> ContainerLimits:
    """[launch.container] read (the schema checked each value's shape): a swap limit below the
    memory limit is refused, naming both, since docker would refuse it only at `run` on the node."""
    lim = ContainerLimits(
        ipc=doc.get("ipc", "host"),
        cgroupns=doc.get("cgroupns"),
        oci_runtime=doc.get("oci_runtime"),
        pull=doc.get("pull"),
        restart=doc.get("restart"),
        memory=doc.get("memory"),
        memory_swap=doc.get("memory_swap"),
        cpus=float(doc["cpus"]) if "cpus" in doc else None,
        pids_limit=int(doc["pids_limit"]) if "pids_limit" in doc else None,
        read_only=bool(doc.get("read_only", False)),
        cap_drop=tuple(doc.get("cap_drop", ())),
        cap_add=tuple(doc.get("cap_add", ())),
        security_opt=tuple(doc.get("security_opt", ())),
        tmpfs=tuple(doc.get("tmpfs", ())),
        workdir=doc.get("workdir"),
        user=doc.get("user"),
    )
    swap, mem = lim.memory_swap, lim.memory
    if swap is not None and (mem is None or parse_size(swap) < parse_size(mem)):
        raise InventoryError(
            f"{where}: launch.container.memory_swap = {lim.memory_swap!r} needs memory "
            f"(= {lim.memory!r}) at or below it",
            hint="memory_swap is RAM + swap: equal to memory means no swap",
        )
    return lim


def node_user() -> str:
    """uid:gid of this process: what `user = "host"` becomes on the node the runtime runs on."""
    return f"{os.getuid()}:{os.getgid()}"


def limit_args(lim: ContainerLimits, engine: str, shm_size: str, host: str, user: str | None) -> list[str]:
    """The `run` flags for `lim`, in one fixed order. `user`: this node's uid:gid for user = "host"
    (None in a plan made off the node: shown as a mark, never the operator's own uid). --ipc itself
    comes before the ulimits (container_run_argv); the shm size follows them."""
    argv: list[str] = []
    if engine == "docker" or lim.ipc != "host":  # podman refuses a shm size beside --ipc host
        argv += ["--shm-size", shm_size]
    for flag, value in (("--restart", lim.restart), ("--pull", lim.pull), ("--runtime", lim.oci_runtime)):
        if value:
            argv += [flag, value]
    if lim.cgroupns:
        argv += ["--cgroupns", lim.cgroupns]
    if lim.memory:
        argv += ["--memory", lim.memory]
    if lim.memory_swap:
        argv += ["--memory-swap", lim.memory_swap]
    if lim.cpus is not None:
        argv += ["--cpus", f"{lim.cpus:g}"]
    if lim.pids_limit is not None:
        argv += ["--pids-limit", str(lim.pids_limit)]
    if lim.read_only:
        argv.append("--read-only")
    for cap in lim.cap_drop:
        argv += ["--cap-drop", cap]
    for cap in lim.cap_add:
        argv += ["--cap-add", cap]
    for opt in lim.security_opt:
        argv += ["--security-opt", opt]
    for mount in lim.tmpfs:
        argv += ["--tmpfs", mount]
    if lim.workdir:
        argv += ["--workdir", lim.workdir]
    if lim.user == HOST_USER:
        argv += ["--user", user or f"<uid:gid of the sparkfleet user on {host}>"]
    elif lim.user:
        argv += ["--user", lim.user]
    return argv
