"""The fleet registry: the Nix-built image copied in by digest (skopeo), pulled by digest everywhere.

Why a registry at all: `docker save | docker load` (today's ssh stream) loses the RepoDigest, so
nothing can tell that a host already holds an image and the same bytes are sent again (sparkrun#152).
A pull by digest is a no-op where the engine already holds that digest, and each host records the
RepoDigest it got.

The registry is Debian's `docker-registry` (CNCF distribution 2.8.2, bookworm): `apt install`
brings it and its systemd unit, it is the reference implementation docker, podman and skopeo are
all tested against, and it needs nothing but a config file and a directory. zot is not packaged
in Debian. The registry serves TLS with a certificate signed by a fleet CA that sparkfleet makes
(openssl, below). Each engine is told to trust that CA for this one registry only: docker through
`/etc/docker/certs.d/<host:port>/ca.crt`, podman and skopeo through `--cert-dir`. An
insecure-registry setting would turn TLS off for the address instead, and docker only takes that
with a daemon restart.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..atomic import ensure_dir, write_bytes
from ..errors import SparkfleetError
from .archive import open_stream, source_kind

DIGEST_CHARS = set("0123456789abcdef")


class RegistryError(SparkfleetError):
    """A registry operation (skopeo, openssl, an engine's pull) failed."""


@dataclass(frozen=True)
class Registry:
    """Where images go: `host:port`, and the directory holding the fleet CA (`ca.crt`)."""

    address: str
    cert_dir: Path

    def ref(self, repo: str, *, tag: str | None = None, digest: str | None = None) -> str:
        if digest:
            return f"{self.address}/{repo}@{check_digest(digest)}"
        return f"{self.address}/{repo}:{tag or 'latest'}"


def check_digest(digest: str) -> str:
    algo, _, hexpart = digest.partition(":")
    if algo != "sha256" or len(hexpart) != 64 or not set(hexpart) <= DIGEST_CHARS:
        raise RegistryError(f"{digest!r} is not a sha256 digest", hint="sha256:<64 hex digits>")
    return digest


def _run(argv: list[str], what: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise RegistryError(
            f"{what}: {argv[0]} is not installed", hint="apt install skopeo openssl"
        ) from None
    except subprocess.TimeoutExpired:
        raise RegistryError(f"{what}: timed out after {timeout:g} s") from None
    if cp.returncode != 0:
        raise RegistryError(f"{what} failed: {cp.stderr.strip()[-800:]}")
    return cp


# ---- the fleet CA ------------------------------------------------------------------------------


def make_ca(ca_dir: Path) -> Path:
    """The fleet CA (`ca.key` 0600, `ca.crt`) in ca_dir, made once; returns the certificate."""
    ensure_dir(ca_dir, 0o700)
    crt, key = ca_dir / "ca.crt", ca_dir / "ca.key"
    if crt.exists() and key.exists():
        return crt
    with tempfile.TemporaryDirectory(dir=ca_dir) as tmp:
        tkey, tcrt = Path(tmp) / "ca.key", Path(tmp) / "ca.crt"
        _run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
              "-days", "3650", "-subj", "/CN=sparkfleet fleet CA", "-keyout", str(tkey), "-out", str(tcrt)],
             "making the fleet CA")  # fmt: skip
        write_bytes(key, tkey.read_bytes(), mode=0o600)
        write_bytes(crt, tcrt.read_bytes(), mode=0o644)
    return crt


def issue_cert(ca_dir: Path, name: str, out_dir: Path) -> tuple[Path, Path]:
    """A server certificate for `name` (an IP address or a DNS name), signed by the fleet CA."""
    make_ca(ca_dir)
    ensure_dir(out_dir, 0o700)
    san = (
        f"IP:{name}" if all(p.isdigit() for p in name.split(".")) and name.count(".") == 3 else f"DNS:{name}"
    )
    key, csr, crt = out_dir / "registry.key", out_dir / "registry.csr", out_dir / "registry.crt"
    ext = out_dir / "san.ext"
    ext.write_text(f"subjectAltName={san}\n")
    _run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
          "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(csr)],
         "making the registry key")  # fmt: skip
    os.chmod(key, 0o600)
    _run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_dir / "ca.crt"), "-CAkey",
          str(ca_dir / "ca.key"), "-CAcreateserial", "-days", "825", "-extfile", str(ext), "-out", str(crt)],
         "signing the registry certificate")  # fmt: skip
    return key, crt


def registry_config(root: Path, listen: str, key: Path, crt: Path) -> str:
    """distribution 2.8's config.yml: filesystem storage under root, TLS with the fleet's cert, and
    deletes off (a pushed digest stays: releases point at it)."""
    return (
        "version: 0.1\n"
        "log:\n  level: warn\n"
        "storage:\n"
        f"  filesystem:\n    rootdirectory: {root}\n"
        "  delete:\n    enabled: false\n"
        "http:\n"
        f"  addr: {listen}\n"
        f"  tls:\n    certificate: {crt}\n    key: {key}\n"
    )


# ---- push, tag, inspect (skopeo) ---------------------------------------------------------------


def push(reg: Registry, source: Path, repo: str, tag: str) -> str:
    """Copy the Nix-built image (stream script or docker-archive) into the registry; its digest.

    skopeo writes the manifest digest it pushed (`--digestfile`): that digest, not the tag, is
    what every host pulls and what a release records.
    """
    with tempfile.TemporaryDirectory(prefix="sf-push-") as tmp:
        archive = Path(source)
        if source_kind(archive) != "archive":  # a nix stream script: its output, as a file
            archive = Path(tmp) / "image.tar"
            with open_stream(Path(source), source_kind(Path(source))) as stream, open(archive, "wb") as out:
                while chunk := stream.read(1 << 20):
                    out.write(chunk)
        digestfile = Path(tmp) / "digest"
        dest = f"docker://{reg.ref(repo, tag=tag)}"
        _run(["skopeo", "copy", "--quiet", "--dest-cert-dir", str(reg.cert_dir),
              "--digestfile", str(digestfile), f"docker-archive:{archive}", dest],
             f"skopeo copy into {reg.address}")  # fmt: skip
        return check_digest(digestfile.read_text().strip())


def digest_of(reg: Registry, repo: str, tag: str) -> str | None:
    """The digest a tag names in the registry (None: no such tag)."""
    try:
        cp = _run(["skopeo", "inspect", "--cert-dir", str(reg.cert_dir), "--raw",
                   f"docker://{reg.ref(repo, tag=tag)}"], f"skopeo inspect {repo}:{tag}")  # fmt: skip
    except RegistryError as exc:
        if "manifest unknown" in exc.message or "not found" in exc.message.lower():
            return None
        raise
    import hashlib

    return "sha256:" + hashlib.sha256(cp.stdout.encode()).hexdigest()


def tag(reg: Registry, repo: str, digest: str, name: str) -> None:
    """Point tag `name` at `digest` (a manifest put: no layer moves). Refused if it names another."""
    held = digest_of(reg, repo, name)
    if held is not None and held != digest:
        raise RegistryError(
            f"{reg.address}/{repo}:{name} already names {held}, not {digest}",
            hint="a release's tag is never moved: cut a new NAME",
        )
    if held == digest:
        return
    _run(["skopeo", "copy", "--quiet", "--src-cert-dir", str(reg.cert_dir),
          "--dest-cert-dir", str(reg.cert_dir),
          f"docker://{reg.ref(repo, digest=digest)}", f"docker://{reg.ref(repo, tag=name)}"],
         f"tagging {repo}:{name}")  # fmt: skip


# ---- on a host: pull by digest, record the RepoDigest ------------------------------------------


def pull_argv(engine: str, reg: Registry, repo: str, digest: str) -> list[str]:
    """docker trusts the CA through /etc/docker/certs.d/<address>/; podman takes --cert-dir."""
    ref = reg.ref(repo, digest=digest)
    if Path(engine).name == "podman":  # the name or the resolved path of the binary
        return [engine, "pull", "--quiet", "--cert-dir", str(reg.cert_dir), ref]
    return [engine, "pull", "--quiet", ref]


def repo_digests(engine: str, ref: str, env: dict[str, str] | None = None) -> list[str]:
    cp = subprocess.run([engine, "image", "inspect", "--format", "{{json .RepoDigests}}", ref],
                        capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    if cp.returncode != 0:
        return []
    try:
        got = json.loads(cp.stdout.strip() or "[]")
    except ValueError:
        return []
    return [d for d in got or [] if isinstance(d, str)]


def ensure_pulled(
    engine: str, reg: Registry, repo: str, digest: str, env: dict[str, str] | None = None
) -> bool:
    """The engine holds `digest` afterwards, with its RepoDigest; True if a pull was needed.

    A host whose engine already lists the RepoDigest is not sent the image again (sparkrun#152).
    """
    ref = reg.ref(repo, digest=digest)
    if ref in repo_digests(engine, ref, env):
        return False
    cp = subprocess.run(pull_argv(engine, reg, repo, digest), capture_output=True, text=True, env=env,
                        timeout=3600, stdin=subprocess.DEVNULL)  # fmt: skip
    if cp.returncode != 0:
        raise RegistryError(f"{engine} pull {ref} failed: {cp.stderr.strip()[-600:]}",
                            hint="is the fleet CA installed for this registry? (docs/images.md)")  # fmt: skip
    if ref not in repo_digests(engine, ref, env):
        raise RegistryError(f"{engine} pulled {ref} but does not list it among its RepoDigests")
    return True


def init(state_dir: Path, address: str, storage: Path) -> dict[str, str]:
    """The head host's registry files: the fleet CA, a certificate for `address` (host:port) and the
    config.yml that `docker-registry serve` (or Debian's docker-registry.service) runs with."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise RegistryError(f"registry address {address!r} is not HOST:PORT", hint="e.g. 10.0.0.1:5000")
    base = Path(state_dir) / "registry"
    ca = make_ca(base / "ca")
    key, crt = issue_cert(base / "ca", host, base / "tls")
    config = base / "config.yml"
    write_bytes(config, registry_config(storage, f"0.0.0.0:{port}", key, crt).encode(), mode=0o600)
    return {"ca": str(ca), "certificate": str(crt), "config": str(config)}


REGISTRY_BIN_ENV = "SPARKFLEET_REGISTRY_BIN"


def serve_argv(state_dir: Path) -> list[str]:
    """The registry's command line on the head host: `docker-registry serve <config.yml>`.

    The binary: $SPARKFLEET_REGISTRY_BIN (NixOS: nixpkgs' docker-distribution `registry`), else
    Debian's and Ubuntu's `docker-registry`. The config is the one `registry init` wrote under the
    same state dir; without it there is nothing to serve.
    """
    config = Path(state_dir) / "registry" / "config.yml"
    if not config.is_file():
        raise RegistryError(
            f"{config}: no registry config",
            hint=f"SPARKFLEET_STATE_DIR={state_dir} sparkfleet registry init --address HOST:PORT",
        )
    binary = os.environ.get(REGISTRY_BIN_ENV) or shutil.which("docker-registry")
    if not binary:
        raise RegistryError(
            "docker-registry is not installed",
            hint=f"apt-get install docker-registry (DGX OS), or set {REGISTRY_BIN_ENV}",
        )
    return [binary, "serve", str(config)]
