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

Two listeners serve one storage (registry_host.py): hosts pull from `address`, anonymous and
read-only; pushes and release tags go to `push_address`, which asks for the login that
`registry init` made (registry_auth.py). skopeo reads that login from a file (`--authfile`), never
from its command line.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import ssl
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..base.atomic import ensure_dir, write_bytes
from ..base.errors import SparkfleetError
from .archive import open_stream, source_kind

DIGEST_CHARS = set("0123456789abcdef")


class RegistryError(SparkfleetError):
    """A registry operation (skopeo, openssl, an engine's pull) failed."""


@dataclass(frozen=True)
class Registry:
    """The fleet registry: `address` (host:port) where hosts pull, anonymous and read-only; the
    directory holding the fleet CA (`ca.crt`; the CA's key may sit beside it); and, for pushes and
    tags, `push_address` with the login in `authfile` (containers-auth.json, 0600)."""

    address: str
    cert_dir: Path
    push_address: str | None = None
    authfile: Path | None = None

    def ref(self, repo: str, *, tag: str | None = None, digest: str | None = None, push: bool = False) -> str:
        where = self.pushing()[0] if push else self.address
        if digest:
            return f"{where}/{repo}@{check_digest(digest)}"
        return f"{where}/{repo}:{tag or 'latest'}"

    def pushing(self) -> tuple[str, Path]:
        """Where pushes go and the file holding their login; refused when there is none."""
        if not self.push_address or not self.authfile:
            raise RegistryError(
                f"no push login for the registry {self.address}: pushes and tags need one "
                f"({self.authfile or 'push-auth.json'} not found)",
                hint="`sparkfleet registry init --address HOST:PORT` writes "
                "$SPARKFLEET_STATE_DIR/registry/push-auth.json on the head host; run there, or copy that "
                "file here and pass --push-auth FILE",
            )
        return self.push_address, self.authfile


def check_digest(digest: str) -> str:
    algo, _, hexpart = digest.partition(":")
    if algo != "sha256" or len(hexpart) != 64 or not set(hexpart) <= DIGEST_CHARS:
        raise RegistryError(f"{digest!r} is not a sha256 digest", hint="sha256:<64 hex digits>")
    return digest


@contextmanager
def ca_only(cert_dir: Path) -> Iterator[str]:
    """A directory holding only the CA certificates (`*.crt`) of `cert_dir`, for skopeo.

    Why: the documented `--cert-dir` is `registry/ca/`, which also holds the CA's own key, and
    skopeo takes every `X.key` in a cert dir for a client key whose `X.cert` it then demands
    ("missing client certificate ca.cert for key ca.key"). The CA's key has no business in a TLS
    handshake anyway.
    """
    certs = sorted(Path(cert_dir).glob("*.crt")) if Path(cert_dir).is_dir() else []
    if not certs:
        raise RegistryError(
            f"{cert_dir}: no CA certificate (*.crt) to trust the registry with",
            hint="the fleet CA is $SPARKFLEET_STATE_DIR/registry/ca/ca.crt on the head host (--cert-dir)",
        )
    with tempfile.TemporaryDirectory(prefix="sf-trust-") as tmp:
        for crt in certs:
            (Path(tmp) / crt.name).write_text(read_ca_cert(crt))
        yield tmp


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

MAX_CA_BYTES = 64 << 10  # a chain of a few certificates; a CA file is never larger
_PEM_CERTS = re.compile(
    r"\s*(-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+-----END CERTIFICATE-----\s*)+"
)


def read_ca_cert(path: Path) -> str:
    """The fleet CA's certificate(s) at `path` as PEM text, to trust or to hand to every host.

    Why so strict: bootstrap writes this text into every host's trust directory, and shows it in
    its plan. A `ca.crt` that is a link (to /etc/shadow), the CA's private key copied over it, or
    a certificate with anything appended must never travel: the file is opened without following
    a link, must be a regular file of at most MAX_CA_BYTES holding nothing but PEM certificates,
    and each must parse as one (FileNotFoundError when there is none).
    """
    hint = ("the fleet CA is the ca.crt `sparkfleet registry init` made ($SPARKFLEET_STATE_DIR/registry/"
            "ca/); put that file back, or move the directory aside and rerun `registry init`")  # fmt: skip
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:  # ELOOP: a link
        raise RegistryError(f"{path}: not the fleet CA's certificate ({exc.strerror})", hint=hint) from None
    try:
        st = os.fstat(fd)
        raw = os.read(fd, MAX_CA_BYTES + 1) if stat.S_ISREG(st.st_mode) else b""
    finally:
        os.close(fd)
    if not stat.S_ISREG(st.st_mode) or len(raw) > MAX_CA_BYTES:
        raise RegistryError(f"{path}: not the fleet CA's certificate (not a regular file of at most "
                            f"{MAX_CA_BYTES} bytes)", hint=hint)  # fmt: skip
    text = raw.decode("ascii", errors="replace")
    if not _PEM_CERTS.fullmatch(text):
        shown = sorted(set(re.findall(r"-----BEGIN ([A-Z0-9 ]{1,40})-----", text))) or ["no PEM block"]
        raise RegistryError(f"{path}: not the fleet CA's certificate: it holds {', '.join(shown)}"
                            " and nothing but PEM certificates may be there", hint=hint)  # fmt: skip
    try:
        ssl.create_default_context(cadata=text)
    except (ssl.SSLError, ValueError) as exc:
        raise RegistryError(f"{path}: not the fleet CA's certificate ({exc})"[:400], hint=hint) from None
    return text


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


def _san(name: str) -> str:
    try:
        return f"IP:{ipaddress.ip_address(name.strip('[]'))}"
    except ValueError:
        return f"DNS:{name}"


def issue_cert(ca_dir: Path, name: str, out_dir: Path, *also: str) -> tuple[Path, Path]:
    """A server certificate for `name` (and `also`: IP addresses or DNS names), signed by the fleet CA."""
    make_ca(ca_dir)
    ensure_dir(out_dir, 0o700)
    sans = ",".join(dict.fromkeys(_san(n) for n in (name, *also)))
    key, csr, crt = out_dir / "registry.key", out_dir / "registry.csr", out_dir / "registry.crt"
    ext = out_dir / "san.ext"
    ext.write_text(f"subjectAltName={sans}\n")
    _run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
          "-subj", f"/CN={name.strip('[]')}", "-keyout", str(key), "-out", str(csr)],
         "making the registry key")  # fmt: skip
    os.chmod(key, 0o600)
    _run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_dir / "ca.crt"), "-CAkey",
          str(ca_dir / "ca.key"), "-CAcreateserial", "-days", "825", "-extfile", str(ext), "-out", str(crt)],
         "signing the registry certificate")  # fmt: skip
    return key, crt


# ---- push, tag, inspect (skopeo) ---------------------------------------------------------------


def push(reg: Registry, source: Path, repo: str, tag: str) -> str:
    """Copy the Nix-built image (stream script or docker-archive) into the registry; its digest.

    skopeo writes the manifest digest it pushed (`--digestfile`): that digest, not the tag, is
    what every host pulls and what a release records. It goes to the push listener, with the login.
    """
    _, authfile = reg.pushing()
    with tempfile.TemporaryDirectory(prefix="sf-push-") as tmp, ca_only(reg.cert_dir) as certs:
        archive = Path(source)
        if source_kind(archive) != "archive":  # a nix stream script: its output, as a file
            archive = Path(tmp) / "image.tar"
            with open_stream(Path(source), source_kind(Path(source))) as stream, open(archive, "wb") as out:
                while chunk := stream.read(1 << 20):
                    out.write(chunk)
        digestfile = Path(tmp) / "digest"
        dest = f"docker://{reg.ref(repo, tag=tag, push=True)}"
        _run(["skopeo", "copy", "--quiet", "--dest-cert-dir", certs, "--dest-authfile", str(authfile),
              "--digestfile", str(digestfile), f"docker-archive:{archive}", dest],
             f"skopeo copy into {reg.push_address}")  # fmt: skip
        return check_digest(digestfile.read_text().strip())


def _manifest(reg: Registry, ref: str, what: str) -> bytes | None:
    """The raw manifest `ref` names at the pull address, as every host would get it (None: unknown)."""
    with ca_only(reg.cert_dir) as certs:
        try:
            cp = _run(["skopeo", "inspect", "--cert-dir", certs, "--raw", f"docker://{ref}"], what)
        except RegistryError as exc:
            if "manifest unknown" in exc.message or "not found" in exc.message.lower():
                return None
            raise
    return cp.stdout.encode()


def digest_of(reg: Registry, repo: str, tag: str) -> str | None:
    """The digest a tag names in the registry (None: no such tag), asked where the hosts pull."""
    raw = _manifest(reg, reg.ref(repo, tag=tag), f"skopeo inspect {repo}:{tag}")
    return None if raw is None else "sha256:" + hashlib.sha256(raw).hexdigest()


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
    _, authfile = reg.pushing()
    with ca_only(reg.cert_dir) as certs:
        _run(["skopeo", "copy", "--quiet", "--src-cert-dir", certs, "--dest-cert-dir", certs,
              "--src-authfile", str(authfile), "--dest-authfile", str(authfile),
              f"docker://{reg.ref(repo, digest=digest, push=True)}",
              f"docker://{reg.ref(repo, tag=name, push=True)}"],
             f"tagging {repo}:{name}")  # fmt: skip
    verify_tag(reg, repo, name, digest)


def verify_tag(reg: Registry, repo: str, name: str, digest: str, image_id: str | None = None) -> None:
    """Tag `name` names `digest` where the hosts pull, and (given `image_id`) that manifest's
    config is that image: what a release recorded is what a host would run."""
    held = digest_of(reg, repo, name)
    if held != digest:
        raise RegistryError(
            f"{reg.address}/{repo}:{name} names {held or 'nothing'}, not the recorded {digest}",
            hint="the registry's tag was moved or removed since the release was cut: "
            "inspect the registry before running this release",
        )
    if image_id is None:
        return
    raw = _manifest(reg, reg.ref(repo, digest=digest), f"skopeo inspect {repo}@{digest}")
    try:
        config = json.loads(raw or b"null")["config"]["digest"]
    except (ValueError, TypeError, KeyError):
        config = None
    if raw is None or "sha256:" + hashlib.sha256(raw).hexdigest() != digest or config != image_id:
        raise RegistryError(
            f"{reg.address}/{repo}@{digest} is not image {image_id} (its config is {config})",
            hint="the release record and the registry disagree: inspect both before running it",
        )


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
