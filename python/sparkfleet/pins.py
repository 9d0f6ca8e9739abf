"""Pins: resolve what the log gave only in part, verify nothing drifted, import a sources.manifest.

A pin is recorded as given (a commit prefix, a digest prefix, a branch name) and is "resolved"
only when its value has the form of an immutable identifier (sparkfleet.inventory.Pin.resolved).
`resolve` asks the source for the full identifier (git ls-remote / a clone for commit prefixes,
the registry v2 manifest API for image digests, the Hugging Face revision API for checkpoints,
a download for url pins) and, for what Nix fetches, the fixed-output hash (`nix hash path` over
`git archive`, `nix-prefetch-docker` for images). A prefix that no longer matches what the source
holds is drift and is never "resolved" to something else. `verify` asks again and fails closed:
anything that is not positively confirmed, unreachable sources included, is a failure.

Base URLs come from `Endpoints` (CLI options, or SPARKFLEET_GIT_BASE / SPARKFLEET_REGISTRY /
HF_ENDPOINT) so tests point them at local servers. Tokens (HF_TOKEN, registry bearer tokens) are
sent as headers only and never appear in a report.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import tempfile
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from . import fleetedit
from .errors import SparkfleetError
from .inventory import FLEET_FILE, Inventory, Pin, validate

HTTP_TIMEOUT_S = 30
GIT_TIMEOUT_S = 600
_HEX = re.compile(r"[0-9a-f]+")
_MANIFEST_ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)


class PinError(SparkfleetError):
    """A pin could not be resolved or verified (the source disagrees, or cannot be asked)."""


class Unreachable(PinError):
    """The source could not be asked (network, auth, missing tool): never read as 'ok'."""


@dataclass(frozen=True)
class Endpoints:
    """Where pins are resolved. Defaults are the public services; env and options override them."""

    git_base: str = "https://github.com"
    registry: str | None = None  # None: derived from the image name (Docker Hub for bare names)
    hf: str = "https://huggingface.co"


@dataclass(frozen=True)
class PinState:
    """What one pin's source says now, next to what the inventory records."""

    name: str
    kind: str
    source: str
    recorded: str
    status: str  # resolved | unchanged | ok | drift | unresolved | unreachable
    current: str | None = None
    nix_hash: str | None = None
    recorded_nix_hash: str | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("resolved", "unchanged", "ok")


@dataclass(frozen=True)
class PinReport:
    """The outcome of `pins resolve` or `pins verify` over the selected pins."""

    action: str
    fleet_file: Path
    pins: tuple[PinState, ...]
    written: bool = False

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.pins)


@dataclass(frozen=True)
class ManifestRow:
    """One line of a runtime/sources.manifest: component, source commit, sha256 of the download, url."""

    component: str
    commit: str
    sha256: str
    url: str
    line: int

    @property
    def local(self) -> bool:
        """`local <path> <sha256> -`: a file kept in the repo itself, covered by the repo's git pin."""
        return self.component == "local"


@dataclass(frozen=True)
class ImportReport:
    manifest: Path
    from_pin: str
    added: tuple[str, ...]
    updated: tuple[str, ...]
    unchanged: tuple[str, ...]
    stale: tuple[str, ...]  # pins from this manifest that it no longer lists (left in place)
    local_files: tuple[ManifestRow, ...] = field(default=())
    written: bool = False


# ---- tools ------------------------------------------------------------------------------------


def _run(argv: list[str], *, timeout: float = GIT_TIMEOUT_S, cwd: Path | None = None) -> str:
    """Run a tool (argv list, no shell); a failure is Unreachable carrying the tool's stderr tail."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "/bin/false"}
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env, check=False
        )
    except FileNotFoundError:
        raise Unreachable(
            f"{argv[0]} is not installed", hint=f"install {argv[0]} or run where it is"
        ) from None
    except subprocess.TimeoutExpired:
        raise Unreachable(f"{argv[0]} timed out after {timeout:.0f} s") from None
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-3:]
        raise Unreachable(f"{' '.join(argv[:2])} failed: {' / '.join(tail) or f'exit {proc.returncode}'}")
    return proc.stdout


def nix_hash_path(path: Path) -> str:
    """The NAR hash (SRI) Nix records for a fetched tree, computed by Nix itself."""
    out = _run(
        ["nix", "--extra-experimental-features", "nix-command", "hash", "path", "--type", "sha256", str(path)]
    )
    return out.strip()


# ---- git --------------------------------------------------------------------------------------


def git_url(endpoints: Endpoints, repo: str) -> str:
    return f"{endpoints.git_base.rstrip('/')}/{repo}"


def _ls_remote(url: str) -> dict[str, str]:
    refs: dict[str, str] = {}
    for line in _run(["git", "ls-remote", "--", url], timeout=HTTP_TIMEOUT_S * 4).splitlines():
        sha, _, ref = line.partition("\t")
        refs[ref] = sha
    return refs


def _git_archive_nar_hash(clone: Path, commit: str) -> str:
    """narHash of the tree GitHub serves as a tarball for `commit` (a git archive, prefix stripped)."""
    with tempfile.TemporaryDirectory(prefix="sparkfleet-nar-") as tmp:
        tree = Path(tmp) / "src"
        tree.mkdir()
        archive = subprocess.Popen(
            ["git", "-C", str(clone), "archive", "--format=tar", commit], stdout=subprocess.PIPE
        )
        assert archive.stdout is not None
        untar = subprocess.run(
            ["tar", "-x", "-C", str(tree)], stdin=archive.stdout, capture_output=True, check=False
        )
        archive.stdout.close()
        if archive.wait() != 0 or untar.returncode != 0:
            raise Unreachable(
                f"git archive {commit[:12]} could not be unpacked: {untar.stderr.decode()[-200:]}"
            )
        return nix_hash_path(tree)


def _git_commit(url: str, value: str, clone: Callable[[], Path]) -> tuple[str, str]:
    """(full commit, how it was found) for a full commit, a commit prefix or a ref name."""
    refs = _ls_remote(url)
    for ref in (value, f"refs/heads/{value}", f"refs/tags/{value}^{{}}", f"refs/tags/{value}"):
        if ref in refs:
            return refs[ref], f"ref {ref}"
    if not _HEX.fullmatch(value):
        raise PinError(f"{url} has no ref {value!r}")
    heads = {sha for sha in refs.values() if sha.startswith(value)}
    if len(heads) == 1:
        return heads.pop(), "a ref head"
    repo = clone()
    proc = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{value}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise PinError(f"no commit {value!r} in {url} (unknown, or a prefix shared by several commits)")
    return proc.stdout.strip(), "the repository history"


def resolve_git(pin: Pin, endpoints: Endpoints, *, with_nix_hash: bool = True) -> PinState:
    url = git_url(endpoints, pin.source)
    with tempfile.TemporaryDirectory(prefix="sparkfleet-git-") as tmp:
        bare = Path(tmp) / "repo.git"

        def clone() -> Path:
            if not bare.exists():
                _run(["git", "clone", "--bare", "--quiet", "--no-tags", "--", url, str(bare)])
            return bare

        try:
            commit, how = _git_commit(url, pin.value, clone)
        except Unreachable as exc:
            return _state(pin, "unreachable", detail=exc.message)
        except PinError as exc:
            return _state(pin, "drift", detail=exc.message)
        if _HEX.fullmatch(pin.value) and not commit.startswith(pin.value):
            return _state(pin, "drift", current=commit, detail=f"{url} resolves {pin.value!r} to {commit}")
        nix_hash = None
        if with_nix_hash:
            try:
                nix_hash = _git_archive_nar_hash(clone(), commit)
            except Unreachable as exc:
                return _state(pin, "unreachable", current=commit, detail=f"nix hash: {exc.message}")
        return _state(pin, "resolved", current=commit, nix_hash=nix_hash, detail=f"{url} ({how})")


# ---- OCI registry (distribution v2 API) --------------------------------------------------------


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


def prefetch_image_hash(image: str, digest: str, final_tag: str, *, arch: str = "arm64") -> str:
    """Nix hash for dockerTools.pullImage (nix-prefetch-docker pulls the arm64 image: needs the network).

    The docker-archive it hashes embeds the final name and tag, so they must be the ones
    pkgs/mia-tp4-image.nix passes to pullImage (the image name, and the tag or "pinned").
    """
    argv = ["nix-prefetch-docker", "--json", "--quiet", "--os", "linux", "--arch", arch]
    argv += ["--image-name", image, "--image-digest", digest]
    argv += ["--final-image-name", image, "--final-image-tag", final_tag]
    out = _run(argv, timeout=3600)
    doc = json.loads(out)
    value = doc.get("hash") or doc.get("sha256")
    if not value:
        raise Unreachable("nix-prefetch-docker printed no hash")
    if not value.startswith("sha256-"):
        value = _run(
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


def resolve_oci(pin: Pin, endpoints: Endpoints, *, with_nix_hash: bool = True) -> PinState:
    tag = pin.tag
    try:
        if pin.resolved:
            found = manifest_digest(pin.source, pin.value, endpoints)
            if found != pin.value:
                return _state(pin, "drift", current=found, detail="the registry no longer serves this digest")
            current, detail = pin.value, "digest present in the registry"
            moved = manifest_digest(pin.source, tag, endpoints) if tag else None
            if tag and moved != pin.value:
                detail += f"; tag {tag} now points at {moved}"
        else:
            if not tag:
                return _state(
                    pin, "unresolved", detail="a digest prefix and no tag: nothing to ask the registry"
                )
            current = manifest_digest(pin.source, tag, endpoints)
            if current is None:
                return _state(pin, "drift", detail=f"the registry has no tag {tag}")
            if not current.startswith(pin.value):
                return _state(
                    pin,
                    "drift",
                    current=current,
                    detail=f"tag {tag} now points at {current}, not at the recorded {pin.value}…",
                )
            detail = f"tag {tag}"
        nix_hash = pin.nix_hash
        if with_nix_hash and nix_hash is None:
            try:
                nix_hash = prefetch_image_hash(pin.source, current, tag or "pinned")
            except Unreachable as exc:
                detail += f"; nix_hash left unset ({exc.message})"
    except Unreachable as exc:
        return _state(pin, "unreachable", detail=exc.message)
    return _state(pin, "resolved", current=current, nix_hash=nix_hash, detail=detail)


# ---- Hugging Face -----------------------------------------------------------------------------


def _hf_json(url: str) -> tuple[object, str | None]:
    headers = {"Accept": "application/json"}
    token = os.environ.get("HF_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=HTTP_TIMEOUT_S) as resp:
        link = resp.headers.get("Link")
        nxt = re.search(r'<([^>]+)>;\s*rel="next"', link or "")
        return json.load(resp), (nxt.group(1) if nxt else None)


def hf_revision(repo: str, revision: str, endpoints: Endpoints) -> str | None:
    """The commit a HF model repo's revision (branch, tag or commit) names; None if it names none."""
    base = endpoints.hf.rstrip("/")
    quoted = urllib.parse.quote(revision, safe="")
    try:
        doc, _ = _hf_json(f"{base}/api/models/{repo}/revision/{quoted}")
        return doc.get("sha") if isinstance(doc, dict) else None
    except urllib.error.HTTPError as exc:
        if exc.code not in (400, 404):
            raise Unreachable(f"{base}: HTTP {exc.code} for {repo}@{revision}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise Unreachable(f"{base}: {getattr(exc, 'reason', exc)}") from None
    if not _HEX.fullmatch(revision):
        return None
    # A commit prefix is not a revision the API takes: walk the main branch's history for it.
    url: str | None = f"{base}/api/models/{repo}/commits/main"
    found: set[str] = set()
    try:
        while url:
            commits, url = _hf_json(url)
            found |= {
                c["id"] for c in commits if isinstance(c, dict) and str(c.get("id", "")).startswith(revision)
            }
    except urllib.error.HTTPError as exc:
        raise Unreachable(f"{base}: HTTP {exc.code} listing {repo} commits") from None
    except (urllib.error.URLError, OSError) as exc:
        raise Unreachable(f"{base}: {getattr(exc, 'reason', exc)}") from None
    if len(found) > 1:
        raise PinError(f"{repo}: prefix {revision} is ambiguous ({', '.join(sorted(found))})")
    return found.pop() if found else None


def resolve_hf(pin: Pin, endpoints: Endpoints) -> PinState:
    try:
        sha = hf_revision(pin.source, pin.value, endpoints)
    except Unreachable as exc:
        return _state(pin, "unreachable", detail=exc.message)
    except PinError as exc:
        return _state(pin, "drift", detail=exc.message)
    if sha is None:
        return _state(pin, "drift", detail=f"{pin.source} has no revision {pin.value!r}")
    if _HEX.fullmatch(pin.value) and not sha.startswith(pin.value):
        return _state(pin, "drift", current=sha, detail=f"{pin.value!r} now names {sha}")
    return _state(pin, "resolved", current=sha, detail=f"{endpoints.hf.rstrip('/')}/{pin.source}")


# ---- url (fixed-output downloads) ---------------------------------------------------------------


def url_sha256(url: str) -> str:
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as resp:
            while chunk := resp.read(1 << 20):
                digest.update(chunk)
    except urllib.error.HTTPError as exc:
        raise Unreachable(f"{url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise Unreachable(f"{url}: {getattr(exc, 'reason', exc)}") from None
    return digest.hexdigest()


def resolve_url(pin: Pin) -> PinState:
    try:
        got = url_sha256(pin.source)
    except Unreachable as exc:
        return _state(pin, "unreachable", detail=exc.message)
    if _HEX.fullmatch(pin.value) and not got.startswith(pin.value):
        return _state(pin, "drift", current=got, detail=f"download hashes to {got}, recorded {pin.value}")
    return _state(pin, "resolved", current=got, nix_hash=sri_of_hex(got), detail="downloaded and hashed")


def sri_of_hex(hexdigest: str) -> str:
    return "sha256-" + base64.b64encode(bytes.fromhex(hexdigest)).decode()


# ---- resolve / verify --------------------------------------------------------------------------


def _state(pin: Pin, status: str, **kw: object) -> PinState:
    return PinState(
        name=pin.name,
        kind=pin.kind,
        source=pin.source,
        recorded=pin.value,
        status=status,
        recorded_nix_hash=pin.nix_hash,
        **kw,  # type: ignore[arg-type]
    )


def ask_source(pin: Pin, endpoints: Endpoints, *, with_nix_hash: bool = True) -> PinState:
    """What the pin's source says now (status resolved / drift / unresolved / unreachable)."""
    if pin.kind == "git":
        return resolve_git(pin, endpoints, with_nix_hash=with_nix_hash)
    if pin.kind == "oci":
        return resolve_oci(pin, endpoints, with_nix_hash=with_nix_hash)
    if pin.kind == "hf":
        return resolve_hf(pin, endpoints)
    if pin.kind == "url":
        return resolve_url(pin)
    raise AssertionError(f"unknown pin kind {pin.kind}")


def select(inv: Inventory, names: Iterable[str]) -> list[Pin]:
    names = list(names)
    unknown = [n for n in names if n not in inv.pins]
    if unknown:
        raise PinError(
            f"unknown pin(s): {', '.join(unknown)}", hint=f"pins are declared in {inv.root / FLEET_FILE}"
        )
    return [inv.pins[n] for n in (names or sorted(inv.pins))]


def _edits(states: Iterable[PinState]) -> list[fleetedit.PinEdit]:
    field_of = {"hf": "revision", "git": "rev", "oci": "digest", "url": "sha256"}
    edits = []
    for s in states:
        values: dict[str, str] = {}
        if s.status == "resolved" and s.current and s.current != s.recorded:
            values[field_of[s.kind]] = s.current
        if s.status == "resolved" and s.kind != "url" and s.nix_hash and s.nix_hash != s.recorded_nix_hash:
            values["nix_hash"] = s.nix_hash
        if values:
            edits.append(fleetedit.PinEdit(s.name, values))
    return edits


def _complete(pin: Pin, with_nix_hash: bool) -> bool:
    """Nothing left to resolve: a full identifier, and the Nix hash where Nix fetches it."""
    needs_nix_hash = with_nix_hash and pin.kind in ("git", "oci")
    return pin.resolved and (pin.nix_hash is not None or not needs_nix_hash)


def resolve(
    inv: Inventory,
    names: Iterable[str] = (),
    *,
    endpoints: Endpoints,
    dry_run: bool = False,
    with_nix_hash: bool = True,
) -> PinReport:
    """Fill in full identifiers (and Nix hashes) where the sources can be asked; write fleet.toml once."""
    states = [
        _state(p, "unchanged", detail="already resolved (`sparkfleet pins verify` re-checks it)")
        if _complete(p, with_nix_hash)
        else ask_source(p, endpoints, with_nix_hash=with_nix_hash)
        for p in select(inv, names)
    ]
    edits = _edits(states)
    states = [
        s
        if s.status != "resolved" or any(e.pin == s.name for e in edits)
        else PinState(**{**vars(s), "status": "unchanged"})
        for s in states
    ]
    path = inv.root / FLEET_FILE
    written = False
    if edits and not dry_run:
        before = path.read_text()
        after = before
        for edit in edits:
            after = fleetedit.set_pin_fields(after, edit)
        validate(fleetedit.check_edit(before, after, edits, {}), "fleet", path)
        written = fleetedit.write(path, after)
    return PinReport("resolve", path, tuple(states), written)


def verify(inv: Inventory, names: Iterable[str] = (), *, endpoints: Endpoints) -> PinReport:
    """Confirm every selected pin against its source; anything short of a positive match fails."""
    out = []
    for pin in select(inv, names):
        if not pin.resolved:
            out.append(
                _state(
                    pin, "unresolved", detail=f"recorded in part; run `sparkfleet pins resolve {pin.name}`"
                )
            )
            continue
        # git: the narHash is re-derived from the archive. oci: pullImage's hash needs the image pulled;
        # Nix itself rejects a wrong one at fetch time, so verify checks the digest only.
        state = ask_source(pin, endpoints, with_nix_hash=pin.kind == "git" and pin.nix_hash is not None)
        if state.status != "resolved":
            out.append(state)
        elif state.current != pin.value:
            out.append(
                PinState(**{**vars(state), "status": "drift", "detail": f"source now says {state.current}"})
            )
        elif pin.kind == "git" and pin.nix_hash and state.nix_hash != pin.nix_hash:
            out.append(
                PinState(
                    **{
                        **vars(state),
                        "status": "drift",
                        "detail": f"nix hash is {state.nix_hash}, recorded {pin.nix_hash}",
                    }
                )
            )
        else:
            out.append(PinState(**{**vars(state), "status": "ok"}))
    return PinReport("verify", inv.root / FLEET_FILE, tuple(out))


# ---- runtime/sources.manifest ------------------------------------------------------------------


def parse_manifest(text: str, path: Path) -> list[ManifestRow]:
    """Rows of a sources.manifest: whitespace columns, `#` comments, `local <path> <sha256> -` rows."""
    rows = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        cols = line.split()
        if len(cols) != 4:
            raise PinError(
                f"{path}:{number}: expected 4 columns (component commit sha256 url), got {len(cols)}",
                hint="sources.manifest rows are `component source-commit sha256-of-download url`",
            )
        component, commit, sha, url = cols
        if not re.fullmatch(r"[0-9a-f]{64}|-", sha):
            raise PinError(f"{path}:{number}: {component}: sha256 column is not 64 hex digits: {sha!r}")
        if component != "local" and not re.match(r"^(https?|file)://", url):
            raise PinError(f"{path}:{number}: {component}: url column is not a URL: {url!r}")
        rows.append(ManifestRow(component, commit, sha, url, number))
    return rows


def component_pin_name(prefix: str, component: str) -> str:
    slug = re.sub(r"[^a-z0-9._-]+", "-", component.lower()).strip("-.") or "component"
    return f"{prefix}{slug}"[:63]


def import_manifest(
    inv: Inventory, manifest: Path, *, from_pin: str, prefix: str | None = None, dry_run: bool = False
) -> ImportReport:
    """Turn each url row into a `kind = "url"` pin (a fixed-output fetch for Nix); edit only what changed."""
    if from_pin not in inv.pins or inv.pins[from_pin].kind != "git":
        raise PinError(
            f"{from_pin!r} is not a git pin", hint="--from names the repo pin whose manifest this is"
        )
    try:
        rows = parse_manifest(manifest.read_text(), manifest)
    except FileNotFoundError:
        raise PinError(f"{manifest}: no such file") from None
    prefix = f"{from_pin}-src-" if prefix is None else prefix
    fleet_path = inv.root / FLEET_FILE
    before = fleet_path.read_text()
    raw_pins = tomllib.loads(before).get("pins", {})
    added: dict[str, dict[str, str]] = {}
    edits: list[fleetedit.PinEdit] = []
    unchanged, seen = [], set()
    for row in (r for r in rows if not r.local):
        name = component_pin_name(prefix, row.component)
        if name in seen:
            raise PinError(f"{manifest}:{row.line}: component {row.component!r} appears twice")
        seen.add(name)
        fields = {"kind": "url", "component": row.component, "url": row.url, "sha256": row.sha256}
        if _HEX.fullmatch(row.commit) and 4 <= len(row.commit) <= 40:
            fields["commit"] = row.commit
        fields["manifest"] = from_pin
        existing = raw_pins.get(name)
        if existing is None:
            added[name] = fields
        elif existing.get("kind") != "url" or existing.get("manifest") != from_pin:
            raise PinError(
                f"pin {name} exists and is not from {from_pin}'s manifest", hint="pass another --prefix"
            )
        else:
            changed = {k: v for k, v in fields.items() if existing.get(k) != v}
            if changed:
                edits.append(fleetedit.PinEdit(name, changed))
            else:
                unchanged.append(name)
    stale = sorted(
        n
        for n, d in raw_pins.items()
        if d.get("kind") == "url" and d.get("manifest") == from_pin and n not in seen
    )
    after = before
    for edit in edits:
        after = fleetedit.set_pin_fields(after, edit)
    after = fleetedit.append_pins(after, f"runtime sources from {from_pin}'s runtime/sources.manifest", added)
    written = False
    if after != before:
        validate(fleetedit.check_edit(before, after, edits, added), "fleet", fleet_path)
        if not dry_run:
            written = fleetedit.write(fleet_path, after)
    return ImportReport(
        manifest=manifest,
        from_pin=from_pin,
        added=tuple(added),
        updated=tuple(e.pin for e in edits),
        unchanged=tuple(unchanged),
        stale=tuple(stale),
        local_files=tuple(r for r in rows if r.local),
        written=written,
    )
