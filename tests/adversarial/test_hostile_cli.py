"""Every verb's arguments and options, given values independently known to be bad, refuse cleanly.

The options come from the real click tree (surfaces.py), so a new typed option gets these cases
without anyone writing them. The oracle is the option's declared kind, not the code that checks it:

* a number of seconds or GiB (every float option says which in its name or help; a test checks
  that) is finite and not negative: `nan`, `inf`, `-1` are bad;
* an integer with a declared range: one past each end is bad; a list of integers: a word, or one
  below its minimum, is bad;
* a choice: a word not among the choices is bad;
* a path: one under /proc that does not exist cannot be read or created, so it is bad for every
  path option; a directory where a file is declared, a file where a directory is, is bad;
* arguments and text options: a lane, host, pin, report or scenario the fleet does not have, a
  URL that is not http(s), a value that would reach a command line as an option (`-o...`), are
  bad (`TEXT_CASES`).

A bad value must be refused: a non-zero exit, no traceback, and a message that names the option or
the value. Every verb runs in clisandbox's fleet (hosts that cannot be reached, dry runs where
there are any, servers on a free loopback port where nothing else listens), so a value wrongly
accepted reaches nothing. Each refusal is counted with `tally.bad_input`. Every verb is attacked
here, including those whose own suites attack them further (gateway, keys, registry, release,
image, power, demo --workdir): one oracle for every option of a kind.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path

import click
import pytest

from sparkfleet.base.http import free_port
from support.engines import docker_archive

from . import clisandbox
from .clisandbox import ENGRAM_LANE, HOST, LANE, Sandbox, spelled
from .surfaces import cli_surfaces, option_name
from .tally import bad_input

LOOPBACK = ("--bind", "127.0.0.1")
# How each verb is run so that nothing can be launched or destroyed: dry runs where the verb has
# one, a lane and host of the sandbox fleet (unreachable), never `--here` (that acts on this machine).
BASE: dict[tuple[str, ...], list[str]] = {
    (): ["inventory", "check"],
    ("bench",): ["bench", LANE],
    ("bootstrap",): ["bootstrap", HOST, "--dry-run"],
    ("demo",): ["demo", "--workdir", "{tmp}/demo"],
    ("doctor",): ["doctor", LANE],
    ("engram", "pack"): ["engram", "pack", ENGRAM_LANE, HOST, "--dry-run"],
    ("engram", "verify"): ["engram", "verify", ENGRAM_LANE, HOST],
    ("env",): ["env", LANE, HOST, "--offline"],
    ("gateway", "down"): ["gateway", "down", "--state-dir", "{tmp}/gateway"],
    ("gateway", "run"): ["gateway", "run", "--state-dir", "{tmp}/gateway", "--port", "{port}", *LOOPBACK],
    ("gateway", "status"): ["gateway", "status", "--state-dir", "{tmp}/gateway"],
    ("gateway", "up"): ["gateway", "up", "--state-dir", "{tmp}/gateway", "--port", "{port}", *LOOPBACK],
    ("image", "load"): ["image", "load", LANE, "--image", "{image}", "--dry-run"],
    ("image", "push"): ["image", "push", LANE, "--image", "{image}", "--registry", "127.0.0.1:{port}"],
    ("keys", "add"): ["keys", "add", "sf-user", "--state-dir", "{tmp}/gateway"],
    ("keys", "list"): ["keys", "list", "--state-dir", "{tmp}/gateway"],
    ("keys", "revoke"): ["keys", "revoke", "sf-user", "--state-dir", "{tmp}/gateway"],
    ("keys", "rotate"): ["keys", "rotate", LANE],
    ("history",): ["history", LANE],
    ("launch",): ["launch", LANE, "--dry-run"],
    ("logs",): ["logs", LANE, HOST],
    ("manifest",): ["manifest", LANE, HOST, "--offline"],
    ("measure",): ["measure", HOST],
    ("pins",): ["pins", "verify", "dsv41-flash"],
    ("pins", "import-lock"): ["pins", "import-lock", "{lock}", "--from", "exl3-kit", "--dry-run"],
    ("pins", "import-manifest"): ["pins", "import-manifest", "{manifest}", "--from", "exl3-kit", "--dry-run"],
    ("pins", "resolve"): ["pins", "resolve", "dsv41-flash", "--dry-run"],
    ("pins", "verify"): ["pins", "verify", "dsv41-flash"],
    ("power", "on"): ["power", "on", HOST],
    ("power", "status"): ["power", "status", HOST],
    ("promote",): ["promote", LANE],
    ("registry", "init"): ["registry", "init", "--address", "127.0.0.1:{port}", "--storage", "{tmp}/storage"],
    ("registry", "serve"): ["registry", "serve"],
    ("release", "cut"): ["release", "cut", LANE, "r1", "--registry", "127.0.0.1:{port}"],
    ("report", "compare"): ["report", "compare", "{tmp}/a.json", "{tmp}/b.json"],
    ("report", "html"): ["report", "html", LANE, "--out", "{tmp}/page.html"],
    ("report", "list"): ["report", "list", LANE],
    ("rollback",): ["rollback", LANE],
    ("roofline",): ["roofline", LANE],
    ("smoke",): ["smoke", LANE],
    ("stage",): ["stage", HOST, "--lane", LANE, "--dry-run"],
    ("status",): ["status", LANE],
    ("stop",): ["stop", LANE],
    ("verify",): ["verify", HOST, "--lane", LANE],
    # a value wrongly accepted would serve on a free loopback port until the sandbox's deadline
    ("view", "serve"): ["view", "serve", "--listen", "127.0.0.1:{port}"],
    ("view", "snapshot"): ["view", "snapshot"],
    ("view", "targets"): ["view", "targets", "--out", "{tmp}/prometheus"],
    ("watch",): ["watch", LANE, "--probes", "1"],
}  # fmt: skip

SECONDS_WORDS = ("second", "timeout", "wait", "interval", "latency", "window", "backoff", "poll")


def quantity(p: click.Parameter) -> str | None:
    """'seconds' or 'GiB' when the option says it is one (its name or help), else None."""
    text = f"{option_name(p)} {getattr(p, 'help', '') or ''}".lower()  # type: ignore[arg-type]
    if "gib" in text:
        return "GiB"
    if any(w in text for w in SECONDS_WORDS):
        return "seconds"
    return None


def bad_values(p: click.Parameter) -> list[tuple[str, str]]:
    """(value, why it is bad) for an option, from its declared kind alone ({tmp}: the test's directory,
    {tmp}/a-file: a regular file in it)."""
    t = p.type
    numeric_word = not isinstance(
        t, click.types.IntParamType | click.types.StringParamType | click.Path | click.Choice
    )
    if isinstance(t, click.types.FloatParamType) or quantity(p) and numeric_word:
        unit = quantity(p)
        return [(v, f"{unit} are finite and not negative") for v in ("nan", "inf", "-1")]
    if isinstance(t, click.IntRange):
        out = []
        if t.min is not None:
            out.append((str(t.min - (0 if t.min_open else 1)), f"below the declared minimum {t.min}"))
        if t.max is not None:
            out.append((str(t.max + (0 if t.max_open else 1)), f"above the declared maximum {t.max}"))
        return out
    if isinstance(t, click.types.IntParamType):
        return [("-1", "a count is not negative")]
    if t.name == "ints":
        return [("x", "not an integer"), (str(getattr(t, "minimum", 0) - 1), "below the declared minimum")]
    if isinstance(t, click.Choice):
        return [("sf-no-such-choice", f"not one of {', '.join(map(str, t.choices))}")]
    if isinstance(t, click.Path | click.File):
        out = [("/proc/sf-adversarial-none/x", "under /proc and absent: cannot be read or created")]
        if isinstance(t, click.Path) and not t.dir_okay:
            out.append(("{tmp}", "a directory where a file is declared"))
        if isinstance(t, click.Path) and not t.file_okay:
            out.append(("{tmp}/a-file", "a file where a directory is declared"))
        return out
    return []  # text: TEXT_CASES


def _typed_cases():
    for s in cli_surfaces():
        if s.param is None or not s.required:
            continue
        for value, why in bad_values(s.param):
            yield pytest.param(s, value, why, id=f"{s.id}={value}", marks=pytest.mark.surface(s.id))


@pytest.fixture
def sandbox(tmp_path, monkeypatch) -> Sandbox:
    box = clisandbox.make(tmp_path, monkeypatch)
    (tmp_path / "lock.json").write_text('{"runtime": {}}')
    (tmp_path / "not-json").write_text("{ this is not json")
    (tmp_path / "binary").write_bytes(b"\xff\xfe\x00garbage\x80")
    (tmp_path / "sources.manifest").write_text(
        f"torch 0123abc {'ab' * 32} https://example.invalid/torch.whl\n"
    )
    docker_archive(b"\0" * 512, tmp_path / "image.tar", "fleet/x:1", "sf-hostile-cli")  # a good image
    (tmp_path / "gateway").mkdir()  # the gateway's state dir the verbs that read it are given
    return box


def base_argv(command: tuple[str, ...], tmp: Path) -> list[str]:
    argv = BASE.get(command)
    assert argv is not None, f"`sparkfleet {' '.join(command)}` has no safe invocation in BASE: add one"
    return _fill(argv, tmp)


def _fill(argv: list[str], tmp: Path) -> list[str]:
    subs = {"{lock}": str(tmp / "lock.json"), "{manifest}": str(tmp / "sources.manifest"),
            "{image}": str(tmp / "image.tar")}  # fmt: skip
    port = str(free_port()) if any("{port}" in a for a in argv) else ""
    return [subs.get(a, a.replace("{tmp}", str(tmp)).replace("{port}", port)) for a in argv]


# What a verb prints once it has gone out to a host or a server: a bad value must be refused before.
CONTACTED = ("ssh failed", "unreachable over ssh", "Name or service not known", "cannot read http")


def refused(out: clisandbox.Outcome, *named: str) -> bool:
    """Refused cleanly, naming the value, before contacting anything."""
    return (
        not out.timed_out and out.traceback is None and out.code not in (0, None)
        and out.names(*named) and not out.names(*CONTACTED)
    )  # fmt: skip


def _explain(argv: list[str], out: clisandbox.Outcome) -> str:
    head = f"sparkfleet {shlex.join(argv)}\n exit {out.code}, timed out {out.timed_out}\n"
    return head + out.output[-1500:] + "\n" + (out.traceback or "")


@pytest.mark.parametrize("surface,value,why", list(_typed_cases()))
def test_a_bad_option_value_is_refused_naming_it(sandbox, tmp_path, figures, surface, value, why):
    p = surface.param
    (tmp_path / "a-file").write_text("x")
    value = value.replace("{tmp}", str(tmp_path))
    name = option_name(p)
    argv = [*base_argv(surface.command, tmp_path), f"{name}={value}" if value.startswith("-") else name]
    if not value.startswith("-"):
        argv.append(value)
    if not surface.command:  # a root option goes before the verb
        argv = [f"{name}={value}", *base_argv((), tmp_path)]
    out = sandbox.run(argv)
    ok = refused(out, *p.opts, *spelled(value))
    bad_input(figures, "cli-options", refused=ok)
    assert ok, f"{why}: " + _explain(argv, out)


def test_every_float_option_says_whether_it_is_seconds_or_gib():
    """The oracle above treats a float option as seconds or GiB; a float that is neither needs its own."""
    floats = [
        s
        for s in cli_surfaces()
        if s.param is not None and isinstance(s.param.type, click.types.FloatParamType)
    ]
    assert [s.id for s in floats if quantity(s.param) is None] == []


# ---- arguments and text options: values the fleet itself says are bad ----------------------------

UNKNOWN_LANE, UNKNOWN_HOST = "sf-no-such-lane", "sf-no-such-host"
REGISTRY = "127.0.0.1:{port}"  # a loopback port where nothing listens
TRAVERSAL = "../hosts"  # a lane name that is a path out of recipes/

# Where a verb takes a lane or a host: its argv with {lane} / {host} in that place.
LANE_ARGS = {
    **{(v,): f"{v} {{lane}}" for v in ("bench", "doctor", "history", "launch", "promote", "rollback",
                                       "roofline", "smoke", "status", "stop", "watch")},
    ("env",): f"env {{lane}} {HOST} --offline", ("manifest",): f"manifest {{lane}} {HOST} --offline",
    ("logs",): f"logs {{lane}} {HOST}", ("engram", "pack"): f"engram pack {{lane}} {HOST} --dry-run",
    ("engram", "verify"): f"engram verify {{lane}} {HOST}", ("report", "list"): "report list {lane}",
    ("report", "html"): "report html {lane} --out {tmp}/p.html",
    ("image", "load"): "image load {lane} --image {image} --dry-run",
    ("keys", "rotate"): "keys rotate {lane}",
    ("image", "push"): f"image push {{lane}} --image {{image}} --registry {REGISTRY}",
    ("release", "cut"): f"release cut {{lane}} r1 --registry {REGISTRY}",
}  # fmt: skip
HOST_ARGS = {
    ("env",): f"env {LANE} {{host}} --offline", ("manifest",): f"manifest {LANE} {{host}} --offline",
    ("logs",): f"logs {LANE} {{host}}", ("engram", "pack"): f"engram pack {ENGRAM_LANE} {{host}} --dry-run",
    ("engram", "verify"): f"engram verify {ENGRAM_LANE} {{host}}",
    ("bootstrap",): "bootstrap {host} --dry-run",
    ("measure",): "measure {host}", ("stage",): f"stage {{host}} --lane {LANE} --dry-run",
    ("verify",): f"verify {{host}} --lane {LANE}", ("doctor",): "doctor {host}",
    ("power", "on"): "power on {host}", ("power", "status"): "power status {host}",
}  # fmt: skip
STAGE = f"stage {HOST} --lane {LANE} --dry-run"
CUT = f"release cut {LANE} r1"
IMPORT_LOCK, IMPORT_MANIFEST = "pins import-lock {lock}", "pins import-manifest {manifest}"

# (surface, the command line, the word the refusal must name, why it is bad)
TEXT_CASES: list[tuple[str, str, str, str]] = [
    *[(f"cli:{' '.join(v)}", argv.replace("{lane}", lane), lane, why)
      for v, argv in LANE_ARGS.items()
      for lane, why in ((UNKNOWN_LANE, "no such lane"), (TRAVERSAL, "a path, not a lane"))],
    *[(f"cli:{' '.join(v)}", argv.replace("{host}", UNKNOWN_HOST), UNKNOWN_HOST, "no such host")
      for v, argv in HOST_ARGS.items()],
    ("cli:agent", "agent sf-no-such-action", "sf-no-such-action", "no such action"),
    ("cli:pins resolve", "pins resolve sf-no-such-pin --dry-run", "sf-no-such-pin", "no such pin"),
    ("cli:pins verify", "pins verify sf-no-such-pin", "sf-no-such-pin", "no such pin"),
    ("cli:pins import-lock", "pins import-lock {tmp}/not-json --from exl3-kit --dry-run", "not-json",
     "a lock that is not JSON"),
    ("cli:pins import-manifest", "pins import-manifest {tmp}/binary --from exl3-kit --dry-run", "binary",
     "a manifest that is not text"),
    ("cli:report compare", f"report compare sf-no-such-report sf-other --lane {LANE}", "sf-no-such-report",
     "no such report"),
    ("cli:report compare --lane", f"report compare x --lane {UNKNOWN_LANE}", UNKNOWN_LANE, "no such lane"),
    ("cli:roofline --host", f"roofline {LANE} --host {UNKNOWN_HOST}", UNKNOWN_HOST, "no such host"),
    ("cli:stage --lane", f"stage {HOST} --lane {UNKNOWN_LANE} --dry-run", UNKNOWN_LANE, "no such lane"),
    ("cli:verify --lane", f"verify {HOST} --lane {UNKNOWN_LANE}", UNKNOWN_LANE, "no such lane"),
    ("cli:stage --repo", "stage --source {tmp} --dest {tmp}/d --repo ../../etc@main --dry-run", "../../etc",
     "a path, not ORG/NAME"),
    ("cli:verify --repo", "verify --source {tmp} --dest {tmp}/d --repo=-oProxy/x", "-oProxy/x",
     "not ORG/NAME"),
    ("cli:stage --share", f"{STAGE} --share 3/2", "3/2", "share 3 of 2 does not exist"),
    ("cli:stage --peers", f"{STAGE} --share 0/2 --peers {HOST},{UNKNOWN_HOST}", UNKNOWN_HOST, "no such host"),
    ("cli:stage --peer-ports", f"{STAGE} --peers dgx1,dgx2 --peer-ports x,y", "x,y", "not ports"),
    ("cli:stage --require-version", f"{STAGE} --require-version 0.0.0+sf-not-this", "0.0.0+sf-not-this",
     "not this sparkfleet's version"),
    *[(f"cli:{v} --url", f"{v} --url file:///etc/passwd --model m", "file:///etc/passwd",
       "not an http(s) URL") for v in ("bench", "smoke")],
    ("cli:rollback --to", f"rollback {LANE} --to ../../x", "../../x", "no such release"),
    ("cli:launch --release", f"launch {LANE} --release sf-no-such-release --dry-run", "sf-no-such-release",
     "no such release"),
    ("cli:bootstrap --root-prefix", f"bootstrap {HOST} --dry-run --root-prefix relative/dir", "relative/dir",
     "not an absolute directory"),
    ("cli:pins --git-base", "pins --git-base=-oProxyCommand=x resolve exl3-kit --dry-run", "-oProxyCommand=x",
     "would reach git as an option"),
    ("cli:pins --registry", "pins --registry=-oProxyCommand=x resolve exl3-kit-image --dry-run",
     "-oProxyCommand=x", "not a URL"),
    ("cli:pins --hf-endpoint", "pins --hf-endpoint file:///etc resolve dsv41-flash --dry-run", "file:///etc",
     "not an http(s) URL"),
    ("cli:pins import-lock --from", f"{IMPORT_LOCK} --from sf-no-such-pin --dry-run", "sf-no-such-pin",
     "no such pin"),
    ("cli:pins import-lock --at", f"{IMPORT_LOCK} --from exl3-kit --at=-x --dry-run", "-x", "not a commit"),
    ("cli:pins import-manifest --from", f"{IMPORT_MANIFEST} --from sf-no-such-pin --dry-run",
     "sf-no-such-pin", "no such pin"),
    ("cli:pins import-manifest --prefix", f"{IMPORT_MANIFEST} --from exl3-kit --prefix ../x --dry-run",
     "../x", "not a pin name"),
    *[(f"cli:{v} --registry", f"{argv} --registry {where}", where, why)
      for v, argv in (("image push", f"image push {LANE} --image {{image}}"), ("release cut", CUT))
      for where, why in (("sf-no-port", "not HOST:PORT"), ("0.0.0.0:5000", "names no host to pull from"),
                         ("-oProxyCommand=x:1", "would reach skopeo as an option"))],
    ("cli:release cut", f"release cut {LANE} ../x --registry {REGISTRY}", "../x", "not a release name"),
    ("cli:release cut --generation", f"{CUT} --registry {REGISTRY} --generation ../../x", "../../x",
     "no such generation"),
]  # fmt: skip

# Free text with no value known to be bad (any string can name a model or a glob): an odd value
# must still end cleanly, and is not counted as a bad input.
ODD_CASES: list[tuple[str, list[str]]] = [
    # scenario ids are tool-eval-bench's: sparkfleet has no list to check them against
    ("cli:bench --quality-scenarios", ["bench", LANE, "--quality", "--quality-scenarios", "sf-none,\n$(id)"]),
    # promote checks its generation first; with none running (as here) --report is never read
    ("cli:promote --report", ["promote", LANE, "--report", "../../etc/passwd"]),
    ("cli:bench --model", ["bench", LANE, "--model", "$(id)\n\x1b[31m"]),
    ("cli:smoke --model", ["smoke", LANE, "--model", "$(id)\n\x1b[31m"]),
    ("cli:stage --include", ["stage", HOST, "--lane", LANE, "--dry-run", "--include", "[!"]),
    ("cli:stage --exclude", ["stage", HOST, "--lane", LANE, "--dry-run", "--exclude", "\n*"]),
    ("cli:verify --include", ["verify", HOST, "--lane", LANE, "--include", "[!"]),
    ("cli:verify --exclude", ["verify", HOST, "--lane", LANE, "--exclude", "\n*"]),
]


@pytest.mark.parametrize(
    "surface,argv,named,why",
    [pytest.param(*c, id=f"{c[0]}:{c[2]}", marks=pytest.mark.surface(c[0])) for c in TEXT_CASES],
)
def test_a_bad_argument_is_refused_naming_it(sandbox, tmp_path, figures, surface, argv, named, why):
    argv = _fill(shlex.split(argv), tmp_path)
    out = sandbox.run(argv)
    ok = refused(out, named)
    bad_input(figures, "cli-arguments", refused=ok)
    assert ok, f"{why}: " + _explain(argv, out)


@pytest.mark.parametrize(
    "surface,argv", [pytest.param(*c, id=c[0], marks=pytest.mark.surface(c[0])) for c in ODD_CASES]
)
def test_an_odd_text_value_ends_cleanly(sandbox, tmp_path, surface, argv):
    out = sandbox.run(_fill(argv, tmp_path))
    assert not out.timed_out and out.traceback is None, _explain(argv, out)


def test_the_base_invocations_cannot_reach_a_host(sandbox, tmp_path):
    """What every case runs on: a verb that contacts a host fails to reach it, and says so."""
    out = sandbox.run(base_argv(("status",), tmp_path))
    assert out.code not in (0, None) and out.traceback is None and "dgx1" in out.output, out.output


@pytest.mark.surface("cli:bench --tag")
def test_a_tag_with_path_parts_writes_only_inside_the_reports_folder(sandbox, tmp_path, figures):
    """A tag names the report's files; `../../x` in it must not place them outside --out."""
    before = {p for p in tmp_path.rglob("*") if "fleet" not in p.parts}
    argv = ["bench", LANE, "--tag", "../../escaped", "--out", str(tmp_path / "reports")]
    out = sandbox.run(argv)
    assert not out.timed_out and out.traceback is None, _explain(argv, out)
    made = {p for p in tmp_path.rglob("*") if "fleet" not in p.parts} - before
    outside = [p for p in made if p.is_file() and tmp_path / "reports" not in p.parents]
    bad_input(figures, "cli-arguments", refused=not outside)
    assert not outside, outside
    assert any(p.is_file() for p in made), "the failed run's report was not written at all"


@pytest.mark.surface("cli:launch --release")
def test_a_dry_run_of_a_release_plans_the_releases_recipe_not_the_checkouts(sandbox, tmp_path):
    """`launch LANE --release NAME --dry-run` used to ignore the release: it showed the checkout's plan.

    The release is shaped as `release cut` writes it (every field a use reads, checked by the
    product's own `release_problem`), frozen with a recipe whose served model name differs."""
    from sparkfleet.images.push import repo_of
    from sparkfleet.launch.generations import utc_id
    from sparkfleet.launch.release import release_problem

    recipe = (sandbox.root / "recipes" / LANE / "recipe.toml").read_text()
    served = 'served_model_name = "deepseek-v4.1-flash"'
    assert served in recipe
    frozen = recipe.replace(served, 'served_model_name = "sf-release-r1"')
    release = {
        "name": "r1", "lane": LANE, "cut_at": 1796342400.0, "generation": utc_id(1796342000.0),
        "recipe_text": frozen, "recipe_sha256": hashlib.sha256(frozen.encode()).hexdigest(),
        "fleet_text": (sandbox.root / "hosts" / "fleet.toml").read_text(),
        "image": {"registry": "10.9.9.9:5000", "repo": repo_of(LANE), "digest": "sha256:" + "cd" * 32,
                  "image_id": "sha256:" + "ef" * 32},
        "pins": {}, "fingerprints": {}, "reports": {"bench": None, "gate": None, "smoke": None},
    }  # fmt: skip
    assert release_problem(release, LANE, "r1") is None  # a record `release cut` could have written
    (sandbox.root / "recipes" / LANE / "releases").mkdir()
    (sandbox.root / "recipes" / LANE / "releases" / "r1.json").write_text(json.dumps(release))
    checkout = sandbox.run(["launch", LANE, "--dry-run", "--json"])
    released = sandbox.run(["launch", LANE, "--release", "r1", "--dry-run", "--json"])
    assert checkout.code == 0 and released.code == 0, _explain(["launch", LANE, "--release", "r1"], released)
    assert "sf-release-r1" in released.output and "sf-release-r1" not in checkout.output
