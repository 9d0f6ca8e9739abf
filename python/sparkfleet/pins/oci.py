"""oci pins: digests from the registry v2 manifest API; pullImage's Nix hash from nix-prefetch-docker."""

from __future__ import annotations

import hashlib
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from ..fleet.inventory import Pin
from .common import HTTP_TIMEOUT_S, Endpoints, PinState, Unreachable, pin_state, run_tool

_MANIFEST_ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)


def registry_of(image: str, endpoints: Endpoints) -> tuple[str, str]:
    """(registry base URL, repository name) for an image reference without tag/digest."""
    if endpoints.registry:
        return endpoints.registry.rstrip("/"), image
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return f"https://{first}", rest
    return "https://registry-1.docker.io", image if "/" in image else f"library/{image}"


def _bearer_token(challenge: str) -> str | None:
    """Answer a `WWW-Authenticate: Bearer realm=...,service=...,scope=...` challenge anonymously."""
    if not challenge.lower().startswith("bearer "):
        return None
    params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    realm = params.pop("realm", None)
    if not realm:
        return None
    query = urllib.parse.urlencode({k: v for k, v in params.items() if k in ("service", "scope")})
    with urllib.request.urlopen(f"{realm}?{query}", timeout=HTTP_TIMEOUT_S) as resp:
        doc = json.load(resp)
    return doc.get("token") or doc.get("access_token")


def _http(url: str, *, method: str = "GET", headers: dict[str, str] | None = None):
    """urlopen with one anonymous bearer-token retry; HTTP errors other than auth are raised as-is."""
    headers = dict(headers or {})
    request = urllib.request.Request(url, method=method, headers=headers)
    try:
        return urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S)
    except urllib.error.HTTPError as exc:
        token = _bearer_token(exc.headers.get("WWW-Authenticate", "")) if exc.code == 401 else None
        if token is None:
            raise
        headers["Authorization"] = f"Bearer {token}"
        return urllib.request.urlopen(
            urllib.request.Request(url, method=method, headers=headers), timeout=HTTP_TIMEOUT_S
        )


def manifest_digest(image: str, reference: str, endpoints: Endpoints) -> str | None:
    """The digest a registry serves for `image:reference` (tag or digest); None when it has none."""
    base, name = registry_of(image, endpoints)
    url = f"{base}/v2/{name}/manifests/{reference}"
    try:
        with _http(url, method="HEAD", headers={"Accept": _MANIFEST_ACCEPT}) as resp:
            found = resp.headers.get("Docker-Content-Digest")
        if not found:
            with _http(url, headers={"Accept": _MANIFEST_ACCEPT}) as resp:
                found = "sha256:" + hashlib.sha256(resp.read()).hexdigest()
        return found
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise Unreachable(f"{url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise Unreachable(f"{url}: {getattr(exc, 'reason', exc)}") from None


def locked_tool_argv(flake_root: Path, tool: str) -> list[str]:
    """Run `tool` from the nixpkgs the flake at `flake_root` locks, not from whatever is on PATH.

    `nix run --inputs-from ROOT nixpkgs#TOOL` resolves `nixpkgs` through ROOT's flake.lock, so the
    hash is computed by the same nixpkgs revision that will fetch the image.
    """
    lock = flake_root / "flake.lock"
    try:
        nodes = json.loads(lock.read_text())["nodes"]
        inputs = nodes["root"]["inputs"]
        if not isinstance(inputs, dict) or "nixpkgs" not in inputs:  # flake.lock's inputs: an object
            raise KeyError("nixpkgs")
    except FileNotFoundError:
        raise Unreachable(f"{lock}: no such file", hint="the flake's lock names the nixpkgs to use") from None
    except (KeyError, TypeError, ValueError, RecursionError):  # RecursionError: JSON nested too deeply
        raise Unreachable(f"{lock}: no locked nixpkgs input", hint="nix flake lock") from None
    return ["nix", "--extra-experimental-features", "nix-command flakes", "run", "--inputs-from",
            str(flake_root), f"nixpkgs#{tool}", "--"]  # fmt: skip


def prefetch_image_hash(
    image: str, digest: str, final_tag: str, *, flake_root: Path, arch: str = "arm64"
) -> str:
    """Nix hash for dockerTools.pullImage (nix-prefetch-docker pulls the arm64 image: needs the network).

    nix-prefetch-docker comes from the flake's locked nixpkgs (`locked_tool_argv`). The
    docker-archive it hashes embeds the final name and tag, so they must be the ones
    pkgs/mia-tp4-image.nix passes to pullImage (the image name, and the tag or "pinned").
    """
    argv = [*locked_tool_argv(flake_root, "nix-prefetch-docker"), "--json", "--quiet", "--os", "linux"]
    argv += ["--arch", arch, "--image-name", image, "--image-digest", digest]
    argv += ["--final-image-name", image, "--final-image-tag", final_tag]
    try:
        out = run_tool(argv, timeout=3600)
    except Unreachable as exc:
        if "is not installed" in exc.message:
            raise Unreachable(
                "nix is not installed: the image hash is computed with nix-prefetch-docker from the "
                f"flake's locked nixpkgs ({' '.join(argv[:7])})",
                hint="install Nix (multi-user) or run `sparkfleet pins resolve` where it is",
            ) from None
        raise
    doc = json.loads(out)
    value = doc.get("hash") or doc.get("sha256")
    if not value:
        raise Unreachable("nix-prefetch-docker printed no hash")
    if not value.startswith("sha256-"):
        value = run_tool(
            [
                "nix",
                "--extra-experimental-features",
                "nix-command",
                "hash",
                "to-sri",
                "--type",
                "sha256",
                value,
            ]
        ).strip()
    return value


def resolve_oci(
    pin: Pin, endpoints: Endpoints, *, with_nix_hash: bool = True, flake_root: Path | None = None
) -> PinState:
    """The pin's digest from the registry; its Nix hash with the locked nixpkgs of `flake_root`."""
    tag = pin.tag
    try:
        if pin.resolved:
            found = manifest_digest(pin.source, pin.value, endpoints)
            if found != pin.value:
                return pin_state(
                    pin, "drift", current=found, detail="the registry no longer serves this digest"
                )
            current, detail = pin.value, "digest present in the registry"
            moved = manifest_digest(pin.source, tag, endpoints) if tag else None
            if tag and moved != pin.value:
                detail += f"; tag {tag} now points at {moved}"
        else:
            if not tag:
                return pin_state(
                    pin, "unresolved", detail="a digest prefix and no tag: nothing to ask the registry"
                )
            current = manifest_digest(pin.source, tag, endpoints)
            if current is None:
                return pin_state(pin, "drift", detail=f"the registry has no tag {tag}")
            if not current.startswith(pin.value):
                return pin_state(
                    pin,
                    "drift",
                    current=current,
                    detail=f"tag {tag} now points at {current}, not at the recorded {pin.value}…",
                )
            detail = f"tag {tag}"
        nix_hash = pin.nix_hash
        if with_nix_hash and nix_hash is None and flake_root is None:
            detail += "; nix_hash left unset (no flake to take nixpkgs from)"
        elif with_nix_hash and nix_hash is None:
            assert flake_root is not None
            try:
                nix_hash = prefetch_image_hash(pin.source, current, tag or "pinned", flake_root=flake_root)
            except Unreachable as exc:
                detail += f"; nix_hash left unset ({exc.message})"
    except Unreachable as exc:
        return pin_state(pin, "unreachable", detail=exc.message)
    return pin_state(pin, "resolved", current=current, nix_hash=nix_hash, detail=detail)
