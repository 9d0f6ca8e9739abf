"""Pins: resolve what the log gave only in part, verify nothing drifted, import a sources.manifest.

A pin is recorded as given (a commit prefix, a digest prefix, a branch name) and is "resolved"
only when its value has the form of an immutable identifier (sparkfleet.fleet.inventory.Pin.resolved).
`resolve` asks the source for the full identifier (git ls-remote / a clone for commit prefixes,
the registry v2 manifest API for image digests, the Hugging Face revision API for checkpoints,
a download for url pins) and, for what Nix fetches, the fixed-output hash (`nix hash path` over
`git archive`, `nix-prefetch-docker` for images). A prefix that no longer matches what the source
holds is drift and is never "resolved" to something else. `verify` asks again and fails closed:
anything that is not positively confirmed, unreachable sources included, is a failure.

Base URLs come from `Endpoints` (CLI options, or SPARKFLEET_GIT_BASE / SPARKFLEET_PINS_REGISTRY /
HF_ENDPOINT) so tests point them at local servers. Tokens (HF_TOKEN, registry bearer tokens) are
sent as headers only and never appear in a report.

The package has one module per kind (git, oci, hf, url), the sources.manifest import, and the
loop they share (resolve_verify). This module re-exports the public names.
"""

from __future__ import annotations

from .common import (
    GIT_TIMEOUT_S,
    HTTP_TIMEOUT_S,
    Endpoints,
    PinError,
    PinReport,
    PinState,
    Unreachable,
    nix_hash_path,
    sri_of_hex,
)
from .git import git_url, resolve_git
from .hf import hf_revision, resolve_hf
from .lock import LockImport, import_lock, parse_lock
from .manifest import ImportReport, ManifestRow, component_pin_name, import_manifest, parse_manifest
from .oci import locked_tool_argv, manifest_digest, prefetch_image_hash, registry_of, resolve_oci
from .resolve_verify import ask_source, resolve, select, verify
from .url import resolve_url, url_sha256

__all__ = [
    "GIT_TIMEOUT_S", "HTTP_TIMEOUT_S", "Endpoints", "ImportReport", "ManifestRow", "PinError",
    "PinReport", "PinState", "Unreachable", "ask_source", "component_pin_name", "git_url",
    "hf_revision", "import_lock", "import_manifest", "LockImport", "parse_lock", "manifest_digest",
    "nix_hash_path", "parse_manifest",
    "prefetch_image_hash", "locked_tool_argv", "registry_of", "resolve", "resolve_git", "resolve_hf",
    "resolve_oci",
    "resolve_url", "select", "sri_of_hex", "url_sha256", "verify",
]  # fmt: skip
