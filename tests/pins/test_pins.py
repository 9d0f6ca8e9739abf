"""`sparkfleet pins resolve|verify` against real local sources.

A git repository served over file:// and by `git daemon` on 127.0.0.1, and one HTTP server on
127.0.0.1 speaking the registry v2 manifest API (HEAD/GET /v2/<name>/manifests/<ref>, with an
anonymous bearer-token challenge like Docker Hub's), the Hugging Face revision and commit-list
APIs, and plain file downloads for url pins.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import subprocess
import textwrap
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkfleet import pins
from sparkfleet.cli import main
from sparkfleet.fleet import inventory

HAVE_NIX = shutil.which("nix") is not None


# ---- a local registry + Hugging Face + file server -----------------------------------------------


@dataclass
class FakeHub:
    """What the local server serves; tests mutate it to make sources drift."""

    manifests: dict[tuple[str, str], bytes] = field(default_factory=dict)  # (name, tag) -> manifest body
    hf_revisions: dict[tuple[str, str], str] = field(default_factory=dict)  # (repo, revision) -> sha
    hf_commits: dict[str, list[str]] = field(default_factory=dict)  # repo -> main history, newest first
    files: dict[str, bytes] = field(default_factory=dict)
    token: str = "t0ken-not-for-logs"
    requests: list[str] = field(default_factory=list)

    def tag(self, name: str, tag: str, body: bytes) -> str:
        self.manifests[(name, tag)] = body
        return "sha256:" + hashlib.sha256(body).hexdigest()

    def by_digest(self, name: str, digest: str) -> bytes | None:
        for (n, _), body in self.manifests.items():
            if n == name and "sha256:" + hashlib.sha256(body).hexdigest() == digest:
                return body
        return None


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # keep pytest output clean
            pass

        def _send(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(code)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, doc: object, headers: dict[str, str] | None = None) -> None:
            self._send(200, json.dumps(doc).encode(), {"Content-Type": "application/json", **(headers or {})})

        def do_HEAD(self) -> None:  # noqa: N802
            self.do_GET()

        def do_GET(self) -> None:  # noqa: N802
            url = urllib.parse.urlsplit(self.path)
            hub.requests.append(f"{self.command} {url.path}")
            parts = url.path.strip("/").split("/")
            if url.path == "/token":
                return self._json({"token": hub.token})
            if parts[0] == "v2" and "manifests" in parts:
                if self.headers.get("Authorization") != f"Bearer {hub.token}":
                    realm = f"http://127.0.0.1:{self.server.server_address[1]}/token"
                    challenge = f'Bearer realm="{realm}",service="local",scope="repository:x:pull"'
                    return self._send(401, b"{}", {"WWW-Authenticate": challenge})
                i = parts.index("manifests")
                name, ref = "/".join(parts[1:i]), parts[i + 1]
                body = (
                    hub.by_digest(name, ref) if ref.startswith("sha256:") else hub.manifests.get((name, ref))
                )
                if body is None:
                    return self._send(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}')
                digest = "sha256:" + hashlib.sha256(body).hexdigest()
                media = "application/vnd.oci.image.index.v1+json"
                return self._send(200, body, {"Docker-Content-Digest": digest, "Content-Type": media})
            if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "revision":
                repo, rev = "/".join(parts[2:4]), urllib.parse.unquote(parts[5])
                sha = hub.hf_revisions.get((repo, rev))
                if sha is None and rev in hub.hf_commits.get(repo, []):
                    sha = rev
                if sha is None:
                    return self._send(404, b'{"error":"Revision Not Found"}')
                return self._json({"id": repo, "sha": sha})
            if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "commits":
                repo = "/".join(parts[2:4])
                page = int(urllib.parse.parse_qs(url.query).get("p", ["0"])[0])
                history = hub.hf_commits.get(repo, [])
                chunk = history[page * 2 : page * 2 + 2]
                headers = {}
                if page * 2 + 2 < len(history):
                    port = self.server.server_address[1]
                    headers["Link"] = f'<http://127.0.0.1:{port}{url.path}?p={page + 1}>; rel="next"'
                return self._json([{"id": c, "title": "commit"} for c in chunk], headers)
            if parts[0] == "files" and "/".join(parts[1:]) in hub.files:
                return self._send(200, hub.files["/".join(parts[1:])])
            return self._send(404)

    return Handler


@pytest.fixture
def hub_server() -> Iterator[tuple[FakeHub, str]]:
    hub = FakeHub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# ---- a local git repository -----------------------------------------------------------------------


def git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "HOME": str(cwd),
        "PATH": "/usr/bin:/bin",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def git_base(tmp_path: Path) -> tuple[str, Path, list[str]]:
    """file:// base holding MiaLab/tp4 with three commits (plus an executable and a symlink)."""
    base = tmp_path / "gitbase"
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    commits = []
    for i in range(3):
        (work / "boot.py").write_text(f"print({i})\n")
        (work / "start-tp4.sh").write_text("#!/bin/sh\nexec python3 boot.py\n")
        (work / "start-tp4.sh").chmod(0o755)
        if not (work / "latest").exists():
            (work / "latest").symlink_to("boot.py")
        git(work, "add", "-A")
        git(work, "commit", "-q", "-m", f"c{i}")
        commits.append(git(work, "rev-parse", "HEAD").strip())
    (base / "MiaLab").mkdir(parents=True)
    git(tmp_path, "clone", "-q", "--bare", str(work), str(base / "MiaLab" / "tp4"))
    return f"file://{base}", work, commits


def independent_nar_hash(work: Path, commit: str, dest: Path) -> str:
    """narHash of the commit's tree from a checkout (not via git archive), computed by Nix."""
    git(work, "worktree", "add", "-q", "--detach", str(dest), commit)
    shutil.rmtree(dest / ".git", ignore_errors=True)
    (dest / ".git").unlink(missing_ok=True)
    argv = [
        "nix",
        "--extra-experimental-features",
        "nix-command",
        "hash",
        "path",
        "--type",
        "sha256",
        str(dest),
    ]
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


FLEET = """\
    # The fleet (test copy). Comments must survive every write.
    schema_version = 1

    [defaults]
    ssh_user = "ops"
    local_hub = "/srv/hub"
    nas_hub = "/mnt/nas/hub"

    [hosts.a]
    address = "a"

    # ---- pins ----
    [pins.tp4]  # the TP4 repo
    kind = "git"
    repo = "MiaLab/tp4"
    rev = "{rev_prefix}"  # the log gives only a prefix
    note = "vendored at {rev_prefix}…"

    [pins.base]
    kind = "oci"
    image = "lmsysorg/sglang"
    tag = "dev-dsv41"
    digest = "{digest_prefix}"

    [pins.ckpt]
    kind = "hf"
    repo = "deepseek-ai/DeepSeek-V4.1-Flash"
    revision = "{hf_prefix}"

    [pins.drafter]
    kind = "hf"
    repo = "org/drafter"
    revision = "main"
    note = "commit not recorded"

    [pins.src-kernels]
    kind = "url"
    url = "{files}/kernels.tar.gz"
    sha256 = "{file_sha}"
    commit = "abc1234"
    # trailing comment inside the last table
"""


@pytest.fixture
def fleet(tmp_path: Path, hub_server, git_base) -> dict[str, object]:
    hub, http_base = hub_server
    gbase, work, commits = git_base
    index = json.dumps({"schemaVersion": 2, "manifests": [{"platform": {"architecture": "arm64"}}]}).encode()
    digest = hub.tag("lmsysorg/sglang", "dev-dsv41", index)
    ckpt = [hashlib.sha1(f"ckpt{i}".encode()).hexdigest() for i in range(5)]
    hub.hf_commits["deepseek-ai/DeepSeek-V4.1-Flash"] = ckpt  # newest first; found on page 2
    drafter = hashlib.sha1(b"drafter").hexdigest()
    hub.hf_revisions[("org/drafter", "main")] = drafter
    hub.hf_commits["org/drafter"] = [drafter]
    hub.files["kernels.tar.gz"] = b"kernel sources\n" * 100
    file_sha = hashlib.sha256(hub.files["kernels.tar.gz"]).hexdigest()
    root = tmp_path / "fleet"
    (root / "hosts").mkdir(parents=True)
    text = textwrap.dedent(FLEET).format(
        rev_prefix=commits[1][:10],
        digest_prefix=digest[:15],
        hf_prefix=ckpt[3][:8],
        files=f"{http_base}/files",
        file_sha=file_sha,
    )
    (root / "hosts" / "fleet.toml").write_text(text)
    endpoints = pins.Endpoints(git_base=gbase, registry=http_base, hf=http_base)
    return {
        "root": root,
        "hub": hub,
        "endpoints": endpoints,
        "commits": commits,
        "work": work,
        "digest": digest,
        "ckpt": ckpt,
        "drafter": drafter,
        "file_sha": file_sha,
        "text": text,
        "http": http_base,
        "git": gbase,
    }


def states(report: pins.PinReport) -> dict[str, pins.PinState]:
    return {s.name: s for s in report.pins}


@pytest.mark.skipif(
    not HAVE_NIX, reason="nix (nix-bin) not installed: the git pin's narHash is computed by Nix"
)
@pytest.mark.nix
def test_resolve_fills_in_full_identifiers_and_keeps_comments(fleet, tmp_path: Path) -> None:
    root = fleet["root"]
    report = pins.resolve(inventory.load(root), endpoints=fleet["endpoints"])
    got = states(report)
    assert report.ok and report.written, report
    assert got["tp4"].current == fleet["commits"][1]
    assert got["base"].current == fleet["digest"]
    assert got["ckpt"].current == fleet["ckpt"][3]
    assert got["drafter"].current == fleet["drafter"]
    assert got["src-kernels"].status == "unchanged"
    # the narHash Nix will check when it fetches the GitHub tarball of that commit
    expected_nar = independent_nar_hash(fleet["work"], fleet["commits"][1], tmp_path / "checkout")
    assert got["tp4"].nix_hash == expected_nar
    # the registry demanded a bearer token; it never appears in the report
    assert fleet["hub"].token not in json.dumps([vars(s) for s in report.pins])
    # no image pull here (no nix-prefetch-docker): the oci nix_hash stays unset, and says why
    if shutil.which("nix-prefetch-docker") is None:
        assert got["base"].nix_hash is None and "nix_hash left unset" in got["base"].detail

    inv = inventory.load(root)
    assert all(inv.pins[n].resolved for n in ("tp4", "base", "ckpt", "drafter", "src-kernels"))
    assert inv.pins["tp4"].nix_hash == expected_nar
    new = (root / "hosts" / "fleet.toml").read_text()
    old_lines, new_lines = fleet["text"].splitlines(), new.splitlines()
    for line in old_lines:
        if line.startswith("#") or "#" in line and "=" not in line:
            assert line in new_lines, f"comment lost: {line!r}"
    assert f'rev = "{fleet["commits"][1]}"  # the log gives only a prefix' in new_lines
    assert f'note = "vendored at {fleet["commits"][1][:10]}…"' in new_lines  # notes are not rewritten
    assert len(new_lines) == len(old_lines) + 1  # only nix_hash was added

    # a second resolve finds nothing to change and writes nothing
    again = pins.resolve(inventory.load(root), endpoints=fleet["endpoints"])
    assert not again.written and {s.status for s in again.pins} == {"unchanged"}
    assert (root / "hosts" / "fleet.toml").read_text() == new

    ok = pins.verify(inventory.load(root), endpoints=fleet["endpoints"])
    assert ok.ok and {s.status for s in ok.pins} == {"ok"}


def test_verify_fails_closed_on_partial_pins(fleet) -> None:
    report = pins.verify(inventory.load(fleet["root"]), endpoints=fleet["endpoints"])
    got = states(report)
    assert not report.ok
    assert {n for n, s in got.items() if s.status == "unresolved"} == {"tp4", "base", "ckpt", "drafter"}
    assert got["src-kernels"].status == "ok"


def _resolved(fleet) -> inventory.Inventory:
    pins.resolve(inventory.load(fleet["root"]), endpoints=fleet["endpoints"], with_nix_hash=False)
    inv = inventory.load(fleet["root"])
    assert all(p.resolved for p in inv.pins.values())
    return inv


def test_verify_reports_each_kind_of_drift(fleet) -> None:
    inv = _resolved(fleet)
    hub = fleet["hub"]
    # the tag moving is not drift (the pinned digest is still served), but it is reported
    hub.tag("lmsysorg/sglang", "dev-dsv41", b'{"schemaVersion":2,"manifests":[]}')
    hub.manifests[("lmsysorg/sglang", "old")] = json.dumps(
        {"schemaVersion": 2, "manifests": [{"platform": {"architecture": "arm64"}}]}
    ).encode()
    got = states(pins.verify(inv, ["base"], endpoints=fleet["endpoints"]))
    assert got["base"].status == "ok" and "now points at" in got["base"].detail
    # now the registry drops it: drift
    del hub.manifests[("lmsysorg/sglang", "old")]
    # the file behind a url pin changes: drift
    hub.files["kernels.tar.gz"] = b"something else"
    # the checkpoint commit disappears from the Hub: drift
    hub.hf_commits["deepseek-ai/DeepSeek-V4.1-Flash"] = ["f" * 40]
    # the git history is rewritten so the pinned commit is gone: drift
    bare = Path(fleet["git"].removeprefix("file://")) / "MiaLab" / "tp4"
    git(bare, "update-ref", "refs/heads/main", fleet["commits"][0])
    git(bare, "reflog", "expire", "--expire=now", "--all")
    git(bare, "gc", "-q", "--prune=now")
    report = pins.verify(inv, endpoints=fleet["endpoints"])
    got = states(report)
    assert not report.ok
    assert {n: s.status for n, s in got.items()} == {
        "tp4": "drift",
        "base": "drift",
        "ckpt": "drift",
        "drafter": "ok",
        "src-kernels": "drift",
    }
    assert got["src-kernels"].current == hashlib.sha256(b"something else").hexdigest()


def test_unreachable_sources_fail_closed(fleet) -> None:
    inv = _resolved(fleet)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    endpoints = pins.Endpoints(git_base=f"{fleet['git']}-moved", registry=dead, hf=dead)
    report = pins.verify(inv, ["tp4", "base", "ckpt"], endpoints=endpoints)
    assert not report.ok
    assert {s.status for s in report.pins} == {"unreachable"}


def test_resolve_never_moves_a_prefix_to_something_else(fleet) -> None:
    root = fleet["root"]
    before = (root / "hosts" / "fleet.toml").read_text()
    fleet["hub"].tag("lmsysorg/sglang", "dev-dsv41", b'{"moved":true}')  # the tag no longer matches 3dbc…
    fleet["hub"].hf_commits["deepseek-ai/DeepSeek-V4.1-Flash"] = ["e" * 40]
    report = pins.resolve(inventory.load(root), ["base", "ckpt"], endpoints=fleet["endpoints"])
    got = states(report)
    assert got["base"].status == "drift" and "not at the recorded" in got["base"].detail
    assert got["ckpt"].status == "drift"
    assert not report.written and (root / "hosts" / "fleet.toml").read_text() == before


def test_ambiguous_or_unknown_git_prefix_is_drift(fleet) -> None:
    inv = inventory.load(fleet["root"])
    pin = inv.pins["tp4"]
    unknown = pins.resolve_git(
        inventory.Pin(pin.name, "git", "0000000", pin.source), fleet["endpoints"], with_nix_hash=False
    )
    assert unknown.status == "drift" and "no commit '0000000'" in unknown.detail
    head = pins.resolve_git(
        inventory.Pin(pin.name, "git", "main", pin.source), fleet["endpoints"], with_nix_hash=False
    )
    assert head.status == "resolved" and head.current == fleet["commits"][2]


def test_git_daemon_transport(fleet, tmp_path: Path) -> None:
    if not Path("/usr/lib/git-core/git-daemon").exists():
        pytest.skip("git-daemon not installed")
    base = Path(fleet["git"].removeprefix("file://"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    daemon = subprocess.Popen(
        [
            "git",
            "daemon",
            "--reuseaddr",
            "--export-all",
            "--listen=127.0.0.1",
            f"--port={port}",
            f"--base-path={base}",
            str(base),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        endpoints = pins.Endpoints(
            git_base=f"git://127.0.0.1:{port}", registry=fleet["http"], hf=fleet["http"]
        )
        report = pins.resolve(
            inventory.load(fleet["root"]), ["tp4"], endpoints=endpoints, with_nix_hash=False
        )
        assert states(report)["tp4"].current == fleet["commits"][1]
        assert report.written
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)


def test_cli_resolve_and_verify_json(fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKFLEET_ROOT", str(fleet["root"]))
    monkeypatch.setenv("SPARKFLEET_GIT_BASE", fleet["git"])
    monkeypatch.setenv("SPARKFLEET_PINS_REGISTRY", fleet["http"])
    monkeypatch.setenv("HF_ENDPOINT", fleet["http"])
    runner = CliRunner()
    bad = runner.invoke(main, ["pins", "verify", "--json"])
    assert bad.exit_code == 1
    assert json.loads(bad.stdout)["ok"] is False
    dry = runner.invoke(main, ["pins", "resolve", "--dry-run", "--no-nix-hash", "ckpt"])
    assert dry.exit_code == 0 and fleet["ckpt"][3] in dry.output
    assert inventory.load(fleet["root"]).pins["ckpt"].value == fleet["ckpt"][3][:8]
    res = runner.invoke(main, ["pins", "resolve", "--no-nix-hash", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["written"] is True
    good = runner.invoke(main, ["pins", "verify", "--json"])
    assert good.exit_code == 0, good.output
    assert {p["status"] for p in json.loads(good.stdout)["pins"]} == {"ok"}
    unknown = runner.invoke(main, ["pins", "verify", "nope"])
    assert unknown.exit_code == 2 and "unknown pin(s): nope" in unknown.output


REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not HAVE_NIX, reason="nix (nix-bin) not installed: converts the prefetch hash to SRI")
@pytest.mark.nix
def test_oci_nix_hash_comes_from_the_locked_nixpkgs_nix_prefetch_docker(
    fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `nix` on PATH is a stand-in that answers `nix run ... nixpkgs#nix-prefetch-docker -- ARGS` the
    # way nix-prefetch-docker does (base32 sha256 in JSON; the real one pulls with skopeo) and
    # records its arguments; every other nix call goes to the real nix. A nix-prefetch-docker on
    # PATH is a decoy: the locked nixpkgs' one must be used, never that.
    real_nix = shutil.which("nix")
    shutil.copyfile(REPO_ROOT / "flake.lock", fleet["root"] / "flake.lock")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    argv_log, decoy_log = tmp_path / "argv", tmp_path / "decoy"
    base32 = subprocess.run(
        [real_nix, "--extra-experimental-features", "nix-command", "hash", "to-base32", "--type", "sha256",
         "sha256-" + "A" * 43 + "="],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    (bindir / "nix").write_text(
        "#!/bin/sh\n"
        f'case " $* " in *" run "*) echo "$@" > {argv_log}; '
        f'echo \'{{"imageName": "x", "sha256": "{base32}"}}\' ;;\n'
        f'  *) exec {real_nix} "$@" ;;\nesac\n'
    )
    (bindir / "nix-prefetch-docker").write_text(f"#!/bin/sh\necho used > {decoy_log}\nexit 1\n")
    for f in bindir.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    report = pins.resolve(inventory.load(fleet["root"]), ["base"], endpoints=fleet["endpoints"])
    assert states(report)["base"].nix_hash == "sha256-" + "A" * 43 + "="
    args = argv_log.read_text().split()
    i = args.index("run")
    assert args[i : i + 5] == [
        "run",
        "--inputs-from",
        str(fleet["root"]),
        "nixpkgs#nix-prefetch-docker",
        "--",
    ]
    assert args[args.index("--arch") + 1] == "arm64"
    assert args[args.index("--image-digest") + 1] == fleet["digest"]
    assert args[args.index("--final-image-tag") + 1] == "dev-dsv41"  # as pkgs/mia-tp4-image.nix pulls it
    assert not decoy_log.exists()
    assert inventory.load(fleet["root"]).pins["base"].nix_hash == "sha256-" + "A" * 43 + "="


def test_locked_tool_argv_and_clear_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(pins.Unreachable, match="flake.lock: no such file"):
        pins.locked_tool_argv(tmp_path, "nix-prefetch-docker")
    (tmp_path / "flake.lock").write_text('{"nodes": {"root": {"inputs": {}}}, "root": "root"}')
    with pytest.raises(pins.Unreachable, match="no locked nixpkgs input"):
        pins.locked_tool_argv(tmp_path, "nix-prefetch-docker")
    shutil.copyfile(REPO_ROOT / "flake.lock", tmp_path / "flake.lock")
    assert pins.locked_tool_argv(tmp_path, "nix-prefetch-docker") == [
        "nix", "--extra-experimental-features", "nix-command flakes", "run", "--inputs-from", str(tmp_path),
        "nixpkgs#nix-prefetch-docker", "--"]  # fmt: skip
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no nix at all
    with pytest.raises(pins.Unreachable, match="nix is not installed: the image hash is computed with "
                       "nix-prefetch-docker from the flake's locked nixpkgs"):  # fmt: skip
        pins.prefetch_image_hash("img", "sha256:" + "0" * 64, "pinned", flake_root=tmp_path)


def test_resolve_hashes_a_url_pin_recorded_without_its_sha256(fleet) -> None:
    path = fleet["root"] / "hosts" / "fleet.toml"
    path.write_text(path.read_text().replace(f'sha256 = "{fleet["file_sha"]}"', 'sha256 = "-"'))
    inv = inventory.load(fleet["root"])
    assert not inv.pins["src-kernels"].resolved
    report = pins.resolve(inv, ["src-kernels"], endpoints=fleet["endpoints"])
    assert states(report)["src-kernels"].current == fleet["file_sha"] and report.written
    assert f'sha256 = "{fleet["file_sha"]}"' in path.read_text()
    assert "# trailing comment inside the last table" in path.read_text()
