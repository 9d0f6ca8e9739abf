"""Local weights or a loud refusal: which of a rank's model files the manifest binds from the NAS.

Why: when one staged shard on a host has changed bytes, a manifest that falls back to the NAS for
that directory ("15 binds: 5 local + 10 NAS") lets `launch` say ready while the lane decodes at
13.3 t/s instead of 35, with nothing to say why. A file the lane's patterns leave out of
staging (the optional page15 pack) is meant to come from the NAS; any other file bound from the NAS
means the staged tree is missing or does not verify, and the launch is refused unless the operator
says `--allow-nas-weights`, in which case every record says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath

from ..base.errors import ExitCode, SparkfleetError
from .manifest import LOCAL, BindManifest, ModelState


class NasWeightsRefused(SparkfleetError):
    """A rank would read non-optional weights from the NAS."""

    exit_code = ExitCode.REFUSED


@dataclass(frozen=True)
class HostWeights:
    """One rank's model files by where they bind from."""

    host: str
    nas_files: tuple[str, ...]  # repo/path of non-optional entries bound from the NAS
    optional_nas: tuple[str, ...]  # repo/path of optional entries (excluded from staging) on the NAS
    reasons: tuple[str, ...] = field(default_factory=tuple)  # the manifest's reasons for those dirs

    def note(self) -> str:
        return f"weights from NAS on {self.host} ({len(self.nas_files)} files)"


def _directory(path: str) -> str:
    parent = str(PurePosixPath(path).parent)
    return "" if parent == "." else parent


def host_weights(manifest: BindManifest, models: list[ModelState]) -> HostWeights:
    """Pure: split the NAS-bound entries of `manifest` into non-optional and optional ones."""
    origin = {(d.repo, d.directory): (d.origin, d.reason) for d in manifest.decisions}
    nas, optional, reasons = [], [], []
    for state in models:
        for f in state.files:
            where, reason = origin.get((state.repo, _directory(f.path)), (LOCAL, ""))
            if where == LOCAL:
                continue
            name = f"{state.repo}/{f.path}"
            if f.excluded:
                optional.append(name)
            else:
                nas.append(name)
                why = f"{state.repo}/{_directory(f.path) or '.'}: {reason}"
                if why not in reasons:
                    reasons.append(why)
    return HostWeights(manifest.host, tuple(nas), tuple(optional), tuple(reasons))


def _optional_groups(files: tuple[str, ...]) -> str:
    dirs = sorted({_directory(f) for f in files})
    return ", ".join(dirs)


def check_local_weights(
    lane: str, weights: dict[str, HostWeights], allow_nas: bool, on_event=lambda _m: None
) -> dict[str, dict]:
    """Refuse (REFUSED) when any rank would bind non-optional weights from the NAS, naming host,
    files and the fix; with `allow_nas`, say it and return host -> {files, note, paths} for records."""
    bad = {h: w for h, w in sorted(weights.items()) if w.nas_files}
    for h, w in sorted(weights.items()):
        if w.optional_nas:
            on_event(
                f"{h}: optional from NAS (read-only, excluded from staging): "
                f"{len(w.optional_nas)} files in {_optional_groups(w.optional_nas)}"
            )
    if bad and not allow_nas:
        lines = []
        for h, w in bad.items():
            shown = ", ".join(w.nas_files[:6]) + (
                f" (+{len(w.nas_files) - 6} more)" if len(w.nas_files) > 6 else ""
            )
            lines.append(f"{h}: {len(w.nas_files)} files would bind from the NAS: {shown}")
            lines += [f"  because {r}" for r in w.reasons[:4]]
        fixes = "; ".join(f"sparkfleet stage {h} --lane {lane}" for h in bad)
        raise NasWeightsRefused(
            f"REFUSED: lane {lane}: staged weights do not verify on {', '.join(bad)}; nothing was "
            "started:\n  " + "\n  ".join(lines),
            hint=f"{fixes} (re-stages and verifies the local copy); or launch with --allow-nas-weights "
            "to serve from the NAS knowingly (slow: a lane reading its weights over the NAS link decoded at "
            "13.3 tok/s instead of 35)",
        )
    out = {}
    for h, w in bad.items():
        on_event(f"WARNING: {w.note()} (--allow-nas-weights)")
        out[h] = {"files": len(w.nas_files), "note": w.note(), "paths": list(w.nas_files)}
    return out


def weights_note(nas_weights: dict[str, dict] | None) -> str:
    """One line for reports: "weights from NAS on dgx2 (10 files)", or "" when all are local."""
    return "; ".join(v["note"] for _h, v in sorted((nas_weights or {}).items()))
