"""Every surface that takes outside input has a hostile case, and the list of surfaces is the code's.

The list is surfaces.py's (the click tree, the agent's ACTIONS, the gateway's and the package's HTTP
routes, the files read that someone else wrote); the cases are the tests in tests/adversarial marked
`@pytest.mark.surface(...)`, collected as pytest collects them. A new verb, option, agent action,
served path or file reader without a case fails here, naming it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections import defaultdict
from pathlib import Path

import pytest

from sparkfleet.base.http import free_port

from . import surfaces as S
from .figures import CHECKED, HEADER, SECURITY, collect_marks, group_of, parse, rows


@pytest.fixture(scope="module")
def marks() -> dict[str, list[str]]:
    return collect_marks()


def _listed(ids) -> str:
    by_kind: dict[str, list[str]] = defaultdict(list)
    for sid in sorted(ids):
        by_kind[sid.split(":", 1)[0]].append(sid)
    return "\n".join(
        f"  {kind} ({len(v)}):\n" + "\n".join(f"    {i}" for i in v) for kind, v in by_kind.items()
    )


@pytest.mark.slow  # collects the whole suite in a second pytest
def test_every_surface_has_a_hostile_case(marks):
    covered = {sid for ids in marks.values() for sid in ids}
    missing = [sid for sid in S.ids() if sid not in covered]
    assert not missing, (
        f"{len(missing)} of {len(S.ids())} surfaces have no case in tests/adversarial marked "
        f"@pytest.mark.surface(ID):\n{_listed(missing)}"
    )


def test_every_mark_names_a_surface_the_code_has(marks):
    known = S.known_ids()
    unknown = {f"{sid}  ({node})" for node, ids in marks.items() for sid in ids if sid not in known}
    assert not unknown, (
        "marks naming no surface in surfaces.py (a typo, or one the code lost):\n"
        + "\n".join(sorted(unknown))
    )


def test_surface_ids_are_unique_and_well_formed():
    ids = [s.id for s in S.all_surfaces()]
    assert len(ids) == len(set(ids))
    form = re.compile(
        r"cli:[a-z-]*( [a-z-]+)*( --?[a-z0-9-]+)?|agent:[a-z-]+|http:\S+ (\*|[A-Z]+) /\S*|file:.+"
    )
    assert [i for i in ids if not form.fullmatch(i)] == []


def test_the_cli_list_is_the_click_tree():
    """Spot checks that the walk reached lazy verbs, subcommands, valued options, and left out flags."""
    ids = set(S.ids())
    assert {
        "cli:stage",
        "cli:stage --reserve-gib",
        "cli:keys add --out",
        "cli:--root",
        "cli:logs --lines",
    } <= ids
    assert "cli:stage --json" not in ids and "cli:launch --dry-run" not in ids and "cli:keys" not in ids
    assert "cli:inventory check" not in ids  # no arguments: its input is fleet.toml (a file surface)
    assert {"cli:stage --json", "cli:demo --fresh", "cli:inventory check"} <= S.known_ids()  # may be named


def test_every_file_reader_in_the_package_is_listed():
    read = S.file_readers()
    listed = {r for f in S.FILES for r in f.readers}
    unlisted = sorted(read - listed - set(S.NOT_OUTSIDE))
    assert not unlisted, (
        "these functions read a file: name the file surface they read in surfaces.FILES "
        "(and give it a hostile case), or say in NOT_OUTSIDE why nobody else writes it:\n  "
        + "\n  ".join(unlisted)
    )
    stale = sorted((listed | set(S.NOT_OUTSIDE)) - read - S.test_module_readers())
    assert not stale, "surfaces.py names readers the package no longer has:\n  " + "\n  ".join(stale)


def test_the_lane_routes_are_read_from_the_demo_server():
    lane = S.http_servers()["demo-lane"]
    assert (
        ("GET", "/v1/models") in lane
        and ("POST", "/v1/chat/completions") in lane
        and ("POST", "/tokenize") in lane
    )


# ---- smg: the routes listed are the installed smg's ----------------------------------------------


def _status(base: str, method: str, path: str) -> int:
    req = urllib.request.Request(base + path, method=method, data=b"{}" if method != "GET" else None,
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _template(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


@pytest.fixture(scope="module")
def smg(tmp_path_factory):
    binary = shutil.which("smg") or str(Path(__import__("sys").executable).parent / "smg")
    if not Path(binary).exists():
        pytest.skip("smg is not installed (the test extras install it)")
    port, metrics = free_port(), free_port()
    log = tmp_path_factory.mktemp("smg") / "smg.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [binary, "launch", "--host", "127.0.0.1", "--port", str(port), "--worker-urls", "http://127.0.0.1:9",
             "--api-key", "sf-coverage-probe-key", "--prometheus-host", "127.0.0.1",
             "--prometheus-port", str(metrics)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError):
                if _status(base, "GET", "/liveness") == 200:
                    break
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.slow  # starts smg, the real gateway
def test_every_smg_route_listed_is_routed_and_no_other_method_is(smg):
    """smg answers 404 from its fallback for a path it has no route for, 405 for a method the path
    lacks; anything else (401 here: the probe sends no key) means the route is there."""
    fill = lambda p: re.sub(r"\{[^}]*\}", "sf-probe", p)  # noqa: E731
    unrouted = [(m, p, c) for m, p in S.SMG_ROUTES if (c := _status(smg, m, fill(p))) in (404, 405)]
    assert not unrouted, f"listed in surfaces.SMG_ROUTES but not routed by this smg: {unrouted}"
    listed = set(S.SMG_ROUTES)
    extra = [
        (m, p, c)
        for p in sorted({p for _, p in S.SMG_ROUTES})
        for m in S.METHODS
        if (m, p) not in listed and (c := _status(smg, m, fill(p))) not in (404, 405)
    ]
    assert not extra, f"this smg routes methods surfaces.SMG_ROUTES does not list: {extra}"


def test_every_path_smgs_own_security_warning_names_is_listed():
    """smg warns at start-up which control-plane paths an unauthenticated gateway leaves open; the
    warning is a literal in its binary. Each path it names must be a listed route."""
    spec = importlib.util.find_spec("smg")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("smg is not installed")
    lib = next(Path(spec.submodule_search_locations[0]).glob("smg_rs*.so"))
    data = lib.read_bytes()
    m = re.search(rb"OPEN: POST /workers[ -~]*?gates them too\)", data)
    assert m, "smg's control-plane warning is not in its binary any more: re-check SMG_ROUTES by hand"
    method = "(?:GET|POST|PUT|PATCH|DELETE)"
    named = re.findall(rf"(?:({method}(?:/{method})*) )?(/[\w/{{}}*]+)", m.group().decode())
    assert len(named) >= 8
    listed = {(meth, _template(p)) for meth, p in S.SMG_ROUTES}
    missing = []
    for methods, path in named:
        if path.endswith("/*"):
            ok = any(p.startswith(path[:-1]) for _, p in listed)
        elif methods:
            ok = all((meth, _template(path)) in listed for meth in methods.split("/"))
        else:
            ok = any(p == _template(path) for _, p in listed)
        if not ok:
            missing.append(f"{methods} {path}".strip())
    assert not missing, f"smg's own warning names routes surfaces.SMG_ROUTES lacks: {missing}"


def test_the_front_passes_everything_to_smg_or_names_each_path():
    """The gateway's list holds smg's routes because the front's locations pass them on (`location /`
    every path); a location of its own that no smg route has is listed too."""
    locations = S.front_locations()
    assert locations, "the nginx front has no location: gateway_routes() cannot read it"
    routes = S.gateway_routes()
    for modifier, path in locations:
        prefix = modifier in ("", "^~") and any(p.startswith(path) for _, p in S.SMG_ROUTES)
        assert prefix or any(p == path for _, p in routes), (modifier, path)


# ---- SECURITY.md ----------------------------------------------------------------------------------


def test_security_md_lists_every_surface_as_the_code_and_the_marks_say(marks):
    """The table's first columns (surface, what it takes, not covered) are what the code and the
    collected marks give now; its cases and figures are the last run's (figures.py --write)."""
    want = [r.cells()[:CHECKED] for r in rows(marks, S.all_surfaces())]
    have = [cells[:CHECKED] for cells in parse(SECURITY.read_text()) if len(cells) == len(HEADER)]
    stale = [w for w in want if w not in have]
    gone = [h for h in have if h not in want]
    assert not stale and not gone, (
        "SECURITY.md's per-surface table is not the code's: run `tests/adversarial/figures.py --write` "
        f"(or --write --no-run).\n  rows to write: {[w[0] for w in stale]}\n"
        f"  rows to drop: {[g[0] for g in gone]}"
    )


def test_every_row_of_the_table_is_a_surface_group():
    groups = {group_of(s) for s in S.all_surfaces() if s.required}
    assert groups == {r.group for r in rows({}, S.all_surfaces())}
