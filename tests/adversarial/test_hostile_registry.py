"""The fleet registry attacked as an anonymous fabric neighbour, a careless operator and an edited file.

A real registry (`registry init`, then `registry serve --json`: Debian's docker-registry twice on
one storage) runs in a network namespace host. Each case here is bad by the test's own making:

* `registry init --address`: addresses that are not HOST:PORT (or name no host: 0.0.0.0) are usage
  errors that write nothing; a good one is where the registry listens, and nowhere else (`ss`);
* an anonymous `skopeo copy` to either listener, and one with a wrong password, can neither move
  a release's tag nor take a new one;
* a release whose registry tag was moved, or whose record names another digest or image, is
  refused by `rollback --to` (and so `launch --release`) before anything is pulled or stopped;
* `image push` with the documented default `--cert-dir` (`registry/ca/`, holding `ca.key` too)
  works; a cert dir without the CA, or with another CA, is a clean error.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import shutil
import ssl
import subprocess

import pytest
from click.testing import CliRunner

from sparkfleet.base.errors import ExitCode, SparkfleetError
from sparkfleet.cli import main as cli
from sparkfleet.images import registry as reg_mod
from sparkfleet.images.push import push_lane
from sparkfleet.images.registry_host import init, split_address
from sparkfleet.launch import generations as gens
from sparkfleet.launch import release
from support.engines import docker_archive
from support.lanefleet import MODELS, write_fleet
from support.registryfleet import served_registry

from .surfaces import REGISTRY_ROUTES
from .tally import bad_input, count

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.xdist_group("registry")]
PORT = 5000
LANE = "lane"
RECIPE = '[lane]\nhosts = ["spark"]\n[world]\ntp = 1\n[launch]\nruntime = "process"\nport = 30998\n' \
         'fabric = "none"\ncommand = ["true"]\n' + MODELS  # fmt: skip


@pytest.fixture(scope="module")
def served(fleetnet, tmp_path_factory):
    if shutil.which("docker-registry") is None or shutil.which("skopeo") is None:
        pytest.fail("docker-registry and skopeo are test dependencies (Makefile DEB_PACKAGES)")
    with served_registry(fleetnet, tmp_path_factory.mktemp("hostile-registry"), "regadv", PORT) as s:
        yield s


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Two different built images (docker-archives) and their image IDs."""
    tmp = tmp_path_factory.mktemp("images")
    out = {}
    for name, fill in (("a", b"\0"), ("b", b"\1")):
        archive = tmp / f"{name}.tar"
        out[name] = (archive, docker_archive(fill * 2048, archive, f"x/{name}:1", name))
    return out


def _trust_only(served):
    """The fleet CA alone, as any host holds it (it is no secret)."""
    trust = served.state / "trust-only"
    trust.mkdir(exist_ok=True)
    shutil.copy(served.reg.cert_dir / "ca.crt", trust / "ca.crt")
    return trust


def _anonymous_copy(served, archive, dest: str, authfile=None) -> subprocess.CompletedProcess:
    """skopeo as a fabric neighbour would run it: the CA trusted, no login or a bad one."""
    login = ["--dest-authfile", str(authfile)] if authfile else ["--dest-no-creds"]
    return subprocess.run(["skopeo", "copy", "--quiet", "--dest-cert-dir", str(_trust_only(served)), *login,
                           f"docker-archive:{archive}", f"docker://{dest}"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


BAD_ADDRESSES = ["0.0.0.0:5000", "10.0.0.1", "10.0.0.1:0", "10.0.0.1:99999", "10.0.0.1:5000\nauth: {}",
                 '10.0.0.1:5000" ', "[::1]5000", "::1:5000", "-x:5000", "", "999.1.1.1:5000", "a b:5000",
                 "[::]:5000"]  # fmt: skip


@pytest.mark.surface("cli:registry init --address", "cli:registry init --push-address")
@pytest.mark.parametrize("option", ["--address", "--push-address"])
@pytest.mark.parametrize("address", BAD_ADDRESSES)
def test_registry_init_refuses_an_address_that_is_not_host_port(
    tmp_path, monkeypatch, figures, option, address
):
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    given = {"--address": "10.0.0.1:5000", option: address}
    argv = ["registry", "init", "--storage", str(tmp_path / "s")] + [x for kv in given.items() for x in kv]
    res = CliRunner().invoke(cli, argv)
    written = (tmp_path / "state" / "registry").exists()
    refused = res.exit_code == ExitCode.USAGE and "is not HOST:PORT" in res.output and not written
    bad_input(figures, "registry-init", refused=refused)
    assert refused, (res.exit_code, res.output, written)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception


@pytest.mark.surface("cli:registry init --address")
def test_registry_init_writes_the_address_given_and_a_login_kept_on_rerun(tmp_path):
    state = tmp_path / "state"
    out = init(state, "127.0.0.1:5999", tmp_path / "storage")
    pull = (state / "registry" / "config.yml").read_text()
    push = (state / "registry" / "push.yml").read_text()
    assert 'addr: "127.0.0.1:5999"' in pull and "0.0.0.0" not in pull
    assert "readonly:\n      enabled: true" in pull and "htpasswd" not in pull  # pulls: anonymous, read-only
    assert 'addr: "127.0.0.1:6000"' in push and "htpasswd:" in push  # pushes: the login
    assert out["push_address"] == "127.0.0.1:6000"
    auth = state / "registry" / "push-auth.json"
    for f in (auth, state / "registry" / "htpasswd", state / "registry" / "config.yml"):
        assert oct(f.stat().st_mode & 0o777) == "0o600", f
    login = json.loads(auth.read_text())["auths"]["127.0.0.1:6000"]["auth"]
    password = base64.b64decode(login).split(b":")[1]
    assert password not in json.dumps(out).encode()  # init's report names the file, never the password
    before = (auth.read_bytes(), (state / "registry" / "htpasswd").read_bytes())
    init(state, "127.0.0.1:5999", tmp_path / "storage")  # a rerun converges: the same login
    assert (auth.read_bytes(), (state / "registry" / "htpasswd").read_bytes()) == before


@pytest.mark.surface("cli:registry serve")
def test_the_registry_listens_only_on_the_addresses_given(served):
    """`registry serve --json` reports both listeners; the namespace's listening sockets on those
    ports are exactly them (no 0.0.0.0, no [::])."""
    roles = {lis["role"]: lis["address"] for lis in served.ready["listeners"]}
    assert served.ready["event"] == "ready"
    assert roles == {"pull": f"{served.host.addr}:{PORT}", "push": f"{served.host.addr}:{PORT + 1}"}
    ss = subprocess.run(served.host.exec_argv("ss", "-ltnH"), capture_output=True, text=True, check=True)
    local = {line.split()[3] for line in ss.stdout.splitlines() if line.split()[3].endswith((f":{PORT}",
                                                                                             f":{PORT + 1}"))}
    assert local == set(roles.values()), ss.stdout


@pytest.mark.surface(
    "http:registry PUT /v2/<repo>/manifests/<tag>", "http:registry POST /v2/<repo>/blobs/uploads/"
)
def test_an_anonymous_copy_can_neither_move_a_release_tag_nor_take_a_new_one(
    served, images, tmp_path, figures
):
    reg = served.reg
    (a, _), (b, _) = images["a"], images["b"]
    digest = reg_mod.push(reg, a, "sparkfleet/hostile", "build-a")  # with the login: works
    reg_mod.tag(reg, "sparkfleet/hostile", digest, "r1")
    wrong = tmp_path / "wrong-auth.json"
    bad_login = base64.b64encode(b"sparkfleet:not-the-password").decode()
    wrong.write_text(json.dumps({"auths": {reg.push_address: {"auth": bad_login}}}))
    for where in (reg.address, reg.push_address):
        for tag_name in ("r1", "r2"):
            for authfile in (None, wrong):
                res = _anonymous_copy(served, b, f"{where}/sparkfleet/hostile:{tag_name}", authfile)
                bad_input(figures, "registry-writes", refused=res.returncode != 0)
                assert res.returncode != 0, (where, tag_name, authfile, res.stderr)
                assert "405" in res.stderr or "unauthorized" in res.stderr.lower(), res.stderr
    assert reg_mod.digest_of(reg, "sparkfleet/hostile", "r1") == digest  # the release tag never moved
    assert reg_mod.digest_of(reg, "sparkfleet/hostile", "r2") is None  # and no new one was taken
    real = base64.b64decode(json.loads(reg.authfile.read_text())["auths"][reg.push_address]["auth"])
    log = served.log.read_text()
    assert "not-the-password" not in log and real.split(b":")[1].decode() not in log  # no login in its log


def _cut_release(served, images, tmp_path, monkeypatch, name):
    """A lane with generation v1 (promoted), image `a` pushed and cut as release r1."""
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(served.state))
    monkeypatch.delenv("SPARKFLEET_REGISTRY_CERTS", raising=False)
    monkeypatch.delenv("SPARKFLEET_REGISTRY_AUTH", raising=False)
    host = {"address": "127.0.0.1", "ssh_user": "root", "local_hub": str(tmp_path / "hub"),
            "nas_hub": str(tmp_path / "nas"), "state_dir": str(tmp_path / "s")}  # fmt: skip
    root = write_fleet(tmp_path / "fleet", {"spark": host}, {LANE: RECIPE})
    from sparkfleet.fleet import inventory

    (a, a_id), _ = images["a"], images["b"]
    pushed = push_lane(inventory.load(root), LANE, a, served.reg)
    recipe = (root / "recipes" / LANE / "recipe.toml").read_text()
    gen = {"id": gens.utc_id(1_700_000_000.0), "lane": LANE, "created_at": 1_700_000_000.0, "status": "ready",
           "good": True, "image_ids": {"spark": a_id}, "recipe_text": recipe,
           "recipe_sha256": hashlib.sha256(recipe.encode()).hexdigest(),
           "fleet_text": (root / "hosts" / "fleet.toml").read_text(), "promotion": {"bench_report": "r.json"}}
    gens.save(root, gen)  # fmt: skip
    release.cut(root, LANE, name, served.reg)
    return root, pushed


@pytest.mark.surface("cli:rollback --to", "cli:launch --release", "file:release record")
@pytest.mark.parametrize("tamper", ["tag-moved", "record-digest", "record-image-id"])
def test_a_release_that_does_not_match_its_registry_is_refused_on_use(
    served, images, tmp_path, monkeypatch, figures, tamper
):
    (b, b_id) = images["b"]
    case = tmp_path / tamper
    case.mkdir()
    name = f"r-{tamper}"  # one tag per case: the registry is shared by the module
    root, pushed = _cut_release(served, images, case, monkeypatch, name)
    assert release.verified_release(root, LANE, name)["image"]["digest"] == pushed["digest"]  # untouched
    record = release.releases_dir(root, LANE) / f"{name}.json"
    if tamper == "tag-moved":  # someone holding the login (skopeo itself, not sparkfleet) moves the tag
        other = reg_mod.push(served.reg, b, pushed["repo"], "build-b")
        trust = str(_trust_only(served))
        res = subprocess.run(["skopeo", "copy", "--quiet", "--src-cert-dir", trust, "--dest-cert-dir", trust,
                              "--dest-authfile", str(served.reg.authfile),
                              f"docker://{served.reg.ref(pushed['repo'], digest=other)}",
                              f"docker://{served.reg.ref(pushed['repo'], tag=name, push=True)}"],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert res.returncode == 0, res.stderr
    else:
        rel = json.loads(record.read_text())
        if tamper == "record-digest":
            rel["image"]["digest"] = reg_mod.push(served.reg, b, pushed["repo"], "build-b")
        else:
            rel["image"]["image_id"] = b_id
        record.chmod(0o644)
        record.write_text(json.dumps(rel))
    with pytest.raises(SparkfleetError) as refused:
        release.verified_release(root, LANE, name)
    assert "could not be verified" in refused.value.message and refused.value.exit_code == ExitCode.REFUSED
    res = CliRunner().invoke(cli, ["--root", str(root), "rollback", LANE, "--to", name, "--no-canary"])
    ok = res.exit_code == ExitCode.REFUSED and "could not be verified" in res.output
    bad_input(figures, "release-use", refused=ok)
    assert ok, res.output
    assert "Traceback" not in res.output and not (case / "s" / "images").exists()  # nothing pulled


@pytest.mark.surface("cli:image push --cert-dir")
def test_image_push_works_with_the_documented_default_cert_dir(
    served, images, tmp_path, monkeypatch, figures
):
    """`registry/ca/` holds `ca.key` beside `ca.crt`: skopeo once took it for a client key
    ("missing client certificate ca.cert for key ca.key"). The default, as written, works."""
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(served.state))
    for env in ("SPARKFLEET_REGISTRY_CERTS", "SPARKFLEET_REGISTRY_AUTH"):
        monkeypatch.delenv(env, raising=False)
    assert (served.state / "registry" / "ca" / "ca.key").is_file()
    host = {"address": "127.0.0.1", "ssh_user": "root", "local_hub": str(tmp_path / "hub"),
            "nas_hub": str(tmp_path / "nas"), "state_dir": str(tmp_path / "s")}  # fmt: skip
    root = write_fleet(tmp_path / "fleet", {"spark": host}, {LANE: RECIPE})
    a, a_id = images["a"]
    push = ["--root", str(root), "image", "push", LANE, "--image", str(a), "--registry", served.reg.address]
    runner = CliRunner()
    res = runner.invoke(cli, [*push, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["image_id"] == a_id
    count(figures, "image-push-cert-dir", "documented_default_pushed")
    res = runner.invoke(cli, [*push, "--cert-dir", str(served.state / "registry" / "ca")])
    assert res.exit_code == 0, res.output

    empty, other = tmp_path / "empty", tmp_path / "other-ca"
    empty.mkdir()
    reg_mod.make_ca(other)
    for cert_dir, said in ((empty, "no CA certificate"), (other, "certificate")):
        res = runner.invoke(cli, [*push, "--cert-dir", str(cert_dir)])
        refused = res.exit_code != 0 and said in res.output and "Traceback" not in res.output
        bad_input(figures, "image-push-cert-dir", refused=refused)
        assert refused, res.output


@pytest.mark.surface("cli:registry serve")
def test_registry_serve_stops_the_pair_when_one_listener_dies(fleetnet, tmp_path):
    """A dead push listener takes the pull one down with it (a unit then restarts the pair), and
    `--json` says so on its last line; a SIGTERM stops both and exits 0."""
    with served_registry(fleetnet, tmp_path, "regpair", PORT) as s:
        code, last = s.stop()
        assert code == 0 and last == {"event": "stopped", "asked": True, "exit_codes": last["exit_codes"]}
    with served_registry(fleetnet, tmp_path, "regpair2", PORT) as s:
        pids = {lis["role"]: lis["pid"] for lis in s.ready["listeners"]}
        os.kill(pids["push"], 9)
        out, _ = s.proc.communicate(timeout=30)
        last = json.loads(out.strip().splitlines()[-1])
        assert s.proc.returncode == ExitCode.SHORTFALL and last["asked"] is False, out
        assert last["error"].startswith("the registry stopped: ")
        assert last["exit_codes"]["push"] == -9
        assert not os.path.exists(f"/proc/{pids['pull']}"), "the pull listener outlived its pair"
        assert "the registry stopped: " in s.log.read_text()


ROUTE_FILL = {"<repo>": "sparkfleet/route-probe", "<tag>": "r1", "<digest>": "sha256:" + "0" * 64,
              "<uuid>": "00000000-0000-4000-8000-000000000000"}  # fmt: skip
WRITES = ("PUT", "POST", "PATCH", "DELETE")
UNROUTED = b"404 page not found"  # distribution's router, for a path it has no route for


def _ask(served, address: str, method: str, path: str, login: str | None) -> tuple[int, bytes]:
    """One HTTPS request as a fabric neighbour sends it: the fleet CA trusted, `login` as Basic."""
    host, port = split_address(address)
    ctx = ssl.create_default_context(cafile=str(_trust_only(served) / "ca.crt"))
    conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=30)
    headers = {"Content-Type": "application/vnd.docker.distribution.manifest.v2+json"}
    if login:
        headers["Authorization"] = f"Basic {login}"
    try:
        conn.request(method, path, body=b"{}" if method in WRITES else None, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.mark.surface(*[f"http:registry {m} {p}" for m, p in REGISTRY_ROUTES])
def test_every_registry_route_takes_a_write_only_with_the_push_login(served, figures):
    """Each listed route (surfaces.REGISTRY_ROUTES), filled in, on both listeners. The oracle is
    docs/images.md's promise, not the configs: the pull listener answers reads to anyone and takes
    no write from anyone; the push listener answers nothing without the login. With the login,
    each route is one the registry routes (not its router's 404), so the list is the registry's."""
    reg = served.reg
    login = json.loads(reg.authfile.read_text())["auths"][reg.push_address]["auth"]
    wrong = base64.b64encode(b"sparkfleet:not-the-password").decode()
    for method, template in REGISTRY_ROUTES:
        path = template
        for name, value in ROUTE_FILL.items():
            path = path.replace(name, value)
        status, body = _ask(served, reg.address, method, path, None)
        if method in WRITES:
            refused = not 200 <= status < 300
            bad_input(figures, "registry-routes", refused=refused)
            assert refused, ("pull listener, anonymous", method, path, status, body[:200])
        else:
            assert status != 401 and UNROUTED not in body, (method, path, status, body[:200])  # pulls: open
        for who, auth in (("anonymous", None), ("a wrong password", wrong)):
            status, body = _ask(served, reg.push_address, method, path, auth)
            bad_input(figures, "registry-routes", refused=status == 401)
            assert status == 401, ("push listener", who, method, path, status, body[:200])
        status, body = _ask(served, reg.push_address, method, path, login)
        assert status != 401 and UNROUTED not in body, ("with the login", method, path, status, body[:200])
    assert reg_mod.digest_of(reg, ROUTE_FILL["<repo>"], "r1") is None  # no request made a tag
