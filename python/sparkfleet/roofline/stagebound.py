"""Staging's bound: a stage run's throughput as a % of the slower of source read and destination write.

Its own module (out of roofline/service) so that `sparkfleet stage` on the node, whose every
run asks for it, imports the probes and the measurements file only, not the inventory, the launch
spec and the roofline's model side; and those only when there is a run to bound (a rerun that
copied nothing has none, and is mostly start-up).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

STREAMS = 4  # parallel readers/writers in the probes: staging's default --jobs
# Staging's own probes, once per host (recorded after): 32 MiB each way, a small cost beside a stage.
PROBE_BYTES = 32 * 1024 * 1024


def staging_bound_of_run(
    run: dict[str, Any], source_hubs: list[Path], repo_dirs: list[str], state_dir: Path | None
) -> dict[str, Any] | None:
    """`staging_bound` for a finished stage run (its `to_dict()`), probing where it read and wrote."""
    roots = [hub / "blobs" for hub in source_hubs]
    roots += [hub / d / "blobs" for hub in source_hubs for d in repo_dirs]
    dest = Path(run["dest_hub"]) / ".locks"
    return staging_bound(run.get("copied_bytes", 0), run.get("seconds", 0.0), roots, dest, state_dir)


def staging_bound(
    copied_bytes: int, seconds: float, source_roots: list[Path], dest_dir: Path, state_dir: Path | None
) -> dict[str, Any] | None:
    """Stage throughput as a % of the slower of source read and destination write on this host.

    Uses the host's recorded `nas_read`/`nvme_write` when `measure` or an earlier stage made them,
    else measures both now (PROBE_BYTES each) and records them for next time.
    """
    if seconds <= 0 or copied_bytes <= 0:
        return None  # a rerun that copied nothing: returned before importing the probes (start-up)
    from .machine import load_measurements, record_measurements
    from .measure import largest_files, read_rate, write_rate

    known = load_measurements(state_dir) if state_dir else {}
    read = known["nas_read"].value if "nas_read" in known else None
    write = known["nvme_write"].value if "nvme_write" in known else None
    fresh: dict[str, tuple[float, str]] = {}
    if read is None:
        rate = read_rate(largest_files(source_roots, 8), PROBE_BYTES, "stage source blobs", STREAMS)
        if rate:
            read = rate.value
            fresh["nas_read"] = (rate.value, rate.method)
    if write is None:
        rate = write_rate(dest_dir, PROBE_BYTES, "stage destination", STREAMS)
        write = rate.value
        fresh["nvme_write"] = (rate.value, rate.method)
    if fresh and state_dir is not None:
        record_measurements(state_dir, fresh)
    if read is None:
        return None
    bound = min(read, write)
    throughput = copied_bytes / seconds
    binding = "source read" if read <= write else "destination write"
    out = {
        "throughput": throughput,
        "source_read": read,
        "dest_write": write,
        "bound": bound,
        "binding": binding,
        "pct_of_bound": 100.0 * throughput / bound,
        "note": None,
    }
    if throughput > bound:
        # The probes read with the page cache dropped and write fsync'd; a run faster than that read
        # from the page cache (a source just written, a rerun): the probe does not bound it, and a
        # percentage above 100 would be a false figure.
        out["pct_of_bound"] = None
        out["note"] = (
            f"faster than this host's cold {binding} probe: the run read cached pages, "
            "so the probe does not bound it"
        )
    return out
