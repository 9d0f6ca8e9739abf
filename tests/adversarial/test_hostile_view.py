"""The fleet view's surfaces under attack: its verb's options, its HTTP paths and headers, and the
files it reads that others wrote (the supervisor's state, incident summaries, bench reports, the
gateway's access log, a host's hub listings).

Each input is bad by the test's own construction (a mutation it chose), never by the checker's
verdict; `bad_input` counts it as refused only when the code under test refused it.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from sparkfleet.cli import main
from sparkfleet.fleet import inventory
from sparkfleet.node.hostread import staged_pin
from sparkfleet.ops import watchstate
from sparkfleet.view import lanefiles
from sparkfleet.view.gatewaylog import MAX_USERS, AccessCounts
from sparkfleet.view.refresh import Refresher
from sparkfleet.view.server import key_matches, serve
from sparkfleet.view.service import parse_listen
from support.lanefleet import lane_recipe, write_fleet

from .tally import bad_input, count

LANE = "lane-x"
KEY = "sk-sf-" + "k" * 40


def _fleet(tmp_path: Path) -> Path:
    host = {
        "address": "localhost",
        "ssh_user": "root",
        "local_hub": str(tmp_path / "nvme" / "hub"),
        "nas_hub": str(tmp_path / "nas" / "hub"),
        "state_dir": str(tmp_path / "state"),
    }
    launch = '\n[launch]\nruntime = "process"\nport = 1\nfabric = "none"\ncommand = ["true"]\n'
    return write_fleet(tmp_path / "fleet", {"spark": host}, {LANE: lane_recipe(["spark"], extra=launch)})


# ---- cli:view serve --listen / targets --view ------------------------------------------------------

BAD_LISTEN = [
    "",
    ":",
    "9841",
    "host:",
    "host:0",
    "host:65536",
    "host:99999",
    "host:-1",
    "-oProxy:1",
    "a b:1",
    "[::1:9841",
    "h\x00:1",
    "h\n:1",
    "x" * 300 + ":1",
    "host:9841:1",
    "http://h:1",
]


@pytest.mark.surface("cli:view serve --listen")
@pytest.mark.parametrize("text", BAD_LISTEN)
def test_a_bad_listen_address_is_a_usage_error_without_a_traceback(figures, tmp_path, text):
    res = CliRunner().invoke(main, ["--root", str(_fleet(tmp_path)), "view", "serve", "--listen", text])
    bad_input(figures, "view-cli", refused=res.exit_code == 2)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and "is not HOST:PORT" in res.output


@pytest.mark.surface("cli:view serve --listen")
def test_an_address_not_of_this_machine_or_a_busy_port_is_named(figures, tmp_path):
    root = str(_fleet(tmp_path))
    res = CliRunner().invoke(main, ["--root", root, "view", "serve", "--listen", "192.0.2.1:9841"])
    bad_input(figures, "view-cli", refused=res.exit_code == 2)
    assert res.exit_code == 2 and "cannot listen on 192.0.2.1:9841" in res.output
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        res = CliRunner().invoke(main, ["--root", root, "view", "serve", "--listen", f"127.0.0.1:{port}"])
    assert res.exit_code == 75 and "another process has the port" in res.output


@pytest.mark.surface("cli:view serve --interval", "cli:view serve --node-timeout")
@pytest.mark.parametrize("opt", ["--interval", "--node-timeout"])
@pytest.mark.parametrize("value", ["0", "-1", "nan-ish", ""])
def test_a_non_positive_interval_is_refused(figures, tmp_path, opt, value):
    res = CliRunner().invoke(
        main, ["--root", str(_fleet(tmp_path)), "view", "serve", opt, value, "--listen", "127.0.0.1:1"]
    )
    bad_input(figures, "view-cli", refused=res.exit_code == 2)
    assert res.exit_code == 2 and "Traceback" not in res.output


@pytest.mark.surface("cli:view targets --view", "cli:view targets --out")
@given(st.text(max_size=40))
def test_targets_take_only_a_host_port_and_write_nothing_else(figures, tmp_path_factory, text):
    """Any text: the verb agrees with the parser it uses, and writes nothing for what it refuses.
    Not counted as bad inputs: the parser under test is what calls a text bad here (BAD_LISTEN,
    above, holds the ones known bad on their own)."""
    tmp = tmp_path_factory.mktemp("targets")
    try:
        parse_listen(text)
        valid = True
    except Exception:  # noqa: BLE001 - whatever parse_listen refuses
        valid = False
    out = tmp / "out"
    res = CliRunner().invoke(
        main, ["--root", str(_fleet(tmp)), "view", "targets", "--out", str(out), "--view", text]
    )
    assert "Traceback" not in res.output
    if not valid:
        assert res.exit_code == 2 and not out.exists(), res.output
    else:
        assert res.exit_code == 0, res.output


@pytest.mark.surface("cli:view targets --out")
def test_targets_into_a_file_or_a_read_only_place_fail_cleanly(figures, tmp_path):
    root = str(_fleet(tmp_path))
    (tmp_path / "afile").write_text("x")
    res = CliRunner().invoke(
        main, ["--root", root, "view", "targets", "--out", str(tmp_path / "afile" / "d")]
    )
    bad_input(figures, "view-cli", refused=res.exit_code != 0)
    assert res.exit_code != 0 and "Traceback" not in res.output and "error" in res.output.lower()
    assert (tmp_path / "afile").read_text() == "x"


@pytest.mark.surface("cli:view snapshot")
def test_snapshot_of_an_unreachable_host_says_so_and_exits_1(figures, tmp_path, monkeypatch):
    host = {
        "address": "192.0.2.7",
        "ssh_user": "root",
        "local_hub": str(tmp_path / "h"),
        "nas_hub": str(tmp_path / "n"),
    }
    root = write_fleet(tmp_path / "fleet", {"gone": host}, {})
    res = CliRunner().invoke(main, ["--root", str(root), "view", "snapshot", "--node-timeout", "2", "--json"])
    count(figures, "view-cli", "faults_injected")
    doc = json.loads(res.output)
    assert res.exit_code == 1 and doc["hosts"][0]["reachable"] is False and doc["hosts"][0]["error"]


# ---- http:view -------------------------------------------------------------------------------------


@pytest.fixture
def served(tmp_path):
    root = _fleet(tmp_path)
    inv = inventory.load(root)
    reports = root / "recipes" / LANE / "reports"
    reports.mkdir(parents=True)
    (tmp_path / "secret").write_text("SECRET-OUTSIDE")
    os.symlink(tmp_path / "secret", reports / "2026-09-27_053009_bench.json")
    incidents = root / "recipes" / LANE / "incidents"
    (incidents / "20260927T053009Z").mkdir(parents=True)
    os.symlink(tmp_path / "secret", incidents / "20260927T053009Z" / "summary.json")
    (incidents / "20260928T053009Z").mkdir()
    (incidents / "20260928T053009Z" / "summary.json").write_text("[" * 100_000 + "]" * 100_000)
    refresher = Refresher(lambda: inv, node_timeout_s=5)
    refresher.refresh()
    server = serve(refresher, "127.0.0.1", 0, KEY, 5.0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        refresher.stop()


def _status(url: str, headers: dict | None = None, method: str = "GET") -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


BAD_AUTH = [
    "",
    "Bearer",
    "Bearer ",
    f"Bearer {KEY[:-1]}",
    f"Bearer {KEY}x",
    f"bearer{KEY}",
    f"Token {KEY}",
    "Basic !!!!",
    "Basic " + "QQ==" * 3,
    "Basic dXNlcg==",
    f"Bearer {KEY.upper()}",
    "Bearer \u00e9",
]


@pytest.mark.surface("http:view GET /metrics", "http:view GET /")
@pytest.mark.parametrize("path", ["/metrics", "/"])
def test_without_the_right_key_nothing_is_served(figures, served, path):
    for header in BAD_AUTH:
        try:
            status, body = _status(served + path, {"Authorization": header} if header else {})
        except UnicodeEncodeError:  # urllib itself refuses a non-latin-1 header: nothing was sent
            continue
        bad_input(figures, "view-http", refused=status == 401)
        assert status == 401 and b"sparkfleet_" not in body and b"<table" not in body, header
    assert _status(served + path, {"Authorization": f"Bearer {KEY}"})[0] == 200


@pytest.mark.surface("http:view GET /metrics")
@given(st.text(max_size=200))
def test_any_authorization_header_is_judged_without_raising(figures, header):
    ok = key_matches(header, KEY)
    bad_input(figures, "view-http", refused=not ok)
    assert not ok


HOSTILE_PATHS = [
    "/lanes/../../etc/passwd",
    "/lanes/%2e%2e/%2e%2e/etc/passwd",
    f"/lanes/{LANE}/../../../x",
    f"/lanes/{LANE}/reports/..%2f..%2fsecret",
    f"/lanes/{LANE}/reports/2026-09-27_053009_bench.json",
    f"/lanes/{LANE}/incidents/20260927T053009Z",
    f"/lanes/{LANE}/incidents/..%2f..",
    f"/lanes/{LANE}/incidents/20260928T053009Z",
    "/lanes/no-such/history",
    "/lanes/%00/history",
    "/" + "a" * 8000,
    "/metrics/../etc/passwd",
    f"/lanes/{LANE}/history/extra",
    "//etc/passwd",
]


@pytest.mark.surface("http:view GET /lanes/*")  # history, reports/<file>, incidents/<bundle>
@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_no_path_reads_outside_the_lane_folders(figures, served, path):
    status, body = _status(served + path, {"Authorization": f"Bearer {KEY}"})
    bad_input(figures, "view-http", refused=status in (404, 414, 400))
    assert b"SECRET-OUTSIDE" not in body
    assert status in (404, 414, 400), (path, status)
    assert _status(served + "/metrics", {"Authorization": f"Bearer {KEY}"})[0] == 200  # still serving


@pytest.mark.surface("http:view GET /")
@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_only_get_is_answered(figures, served, method):
    status, _ = _status(served + "/metrics", {"Authorization": f"Bearer {KEY}"}, method)
    bad_input(figures, "view-http", refused=status == 405)
    assert status == 405


@pytest.mark.surface("http:view GET /metrics")
def test_a_silent_client_does_not_hold_the_service(figures, served):
    """A connection that sends nothing holds one handler thread, never the service: others are served."""
    import socket

    host, port = served.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))):
        count(figures, "view-http", "faults_injected")
        assert _status(served + "/metrics", {"Authorization": f"Bearer {KEY}"})[0] == 200


# ---- files others wrote ----------------------------------------------------------------------------

HOSTILE_DOCS = [
    b"",
    b"not json",
    b"[1, 2]",
    b"null",
    b"[" * 100_000 + b"]" * 100_000,
    b"\xff\xfe",
    json.dumps({"state": "watching"}).encode(),
    json.dumps({"lane": LANE, "state": "bogus"}).encode(),
]


@pytest.mark.surface("file:watch state")
@pytest.mark.parametrize(
    "doc",
    HOSTILE_DOCS
    + [
        json.dumps(
            {
                "lane": LANE,
                "state": "watching",
                "pid": os.getpid(),
                "boot_id": "x",
                "start_ticks": 1,
                "probes": 1,
                "failures": 0,
                "restarts": 0,
            }
        ).encode(),  # a live PID that is not the writer
        json.dumps({"lane": LANE, "state": "watching", "pid": True, "boot_id": "x"}).encode(),
    ],
)
def test_a_hostile_watch_file_reads_as_nobody_watching(figures, tmp_path, doc):
    path = watchstate.watch_path(tmp_path, LANE)
    path.parent.mkdir(parents=True)
    path.write_bytes(doc)
    got = watchstate.read(tmp_path, LANE)
    bad_input(figures, "view-files", refused=got is None)
    assert got is None


@pytest.mark.surface("file:watch state")
def test_the_writers_own_file_reads_back(tmp_path):
    watchstate.record(tmp_path, LANE, "restarting", (5, 2, 1), False, 1.5, "wrong answer")
    got = watchstate.read(tmp_path, LANE)
    assert got is not None and (got.state, got.probes, got.restarts, got.last_error) == (
        "restarting",
        5,
        1,
        "wrong answer",
    )


@pytest.mark.surface("file:incident summary")
@pytest.mark.parametrize("doc", HOSTILE_DOCS)
def test_a_hostile_incident_summary_is_still_counted_never_raises(figures, tmp_path, doc):
    d = tmp_path / "20260927T053009Z"
    d.mkdir()
    (d / "summary.json").write_bytes(doc)
    (tmp_path / "a-file-not-a-bundle").write_text("x")
    got = lanefiles.incidents(tmp_path)
    bad_input(figures, "view-files", refused=len(got) == 1 and got[0].reason == "")
    assert [(i.name, i.kind) for i in got] == [("20260927T053009Z", "probe_failed")]


@pytest.mark.surface("file:bench report")
@pytest.mark.parametrize(
    "doc",
    HOSTILE_DOCS
    + [
        json.dumps(
            {
                "schema": "sparkfleet.bench/1",
                "status": "ok",
                "decode_probe": {"metrics": {"decode_tps": "fast"}},
                "roofline": ["x"],
                "created_utc": 5,
            }
        ).encode(),
    ],
)
def test_a_hostile_report_is_skipped_or_read_as_missing_figures(figures, tmp_path, doc):
    (tmp_path / "2026-09-26_053009_bench.json").write_text(
        json.dumps(
            {
                "schema": "sparkfleet.bench/1",
                "status": "ok",
                "created_utc": "2026-09-26T05:30:09Z",
                "decode_probe": {"metrics": {"decode_tps": 35.0, "ttft_s": 0.2}},
            }
        )
    )
    (tmp_path / "2026-09-27_053009_bench.json").write_bytes(doc)
    got = lanefiles.newest_bench(tmp_path)
    bad_input(figures, "view-files", refused=got is not None and got.decode_tps in (None, 35.0))
    assert got is not None
    assert got.decode_tps == 35.0 or (got.report.startswith("2026-09-27") and got.decode_tps is None)


@pytest.mark.surface("file:gateway access log")
def test_hostile_access_log_lines_are_counted_by_a_fixed_pattern(figures, tmp_path):
    log = tmp_path / "access.log"
    lines = [
        '2026-09-27T05:30:09+00:00 10.0.0.9 alice "GET /v1/models HTTP/1.1" 200 w1 0.001',
        '2026-09-27T05:30:09+00:00 10.0.0.9 - "POST /v1/chat \\x22 HTTP/1.1" 401 - 0.000',
        '2026-09-27T05:30:09+00:00 10.0.0.9 <script> "GET / HTTP/1.1" 200 - 0.000',
        "garbage without fields",
        '2026-09-27T05:30:09+00:00 10.0.0.9 bob "GET / HTTP/1.1" 2000 - 0.000',
    ]
    lines += [
        f'2026-09-27T05:30:09+00:00 10.0.0.9 u{i} "GET / HTTP/1.1" 200 - 0.0' for i in range(MAX_USERS + 50)
    ]
    log.write_text("\n".join(lines) + "\n" + "x" * 100_000)  # an unfinished last line
    counts = AccessCounts(log)
    counts.update()
    users = {u for u, _ in counts.counts}
    bad_input(figures, "view-files", refused=("<script>", "200") not in counts.counts)
    assert counts.counts[("alice", "200")] == 1 and counts.counts[("-", "401")] == 1
    assert ("<script>", "200") not in counts.counts and ("bob", "2000") not in counts.counts
    assert len(users) <= MAX_USERS + 2 and counts.counts[("other", "200")] >= 50  # "other" and "-"
    before = dict(counts.counts)
    log.write_text('2026-09-27T05:31:00+00:00 10.0.0.9 alice "GET / HTTP/1.1" 200 - 0.0\n')  # rotated
    counts.update()
    assert counts.counts[("alice", "200")] == before[("alice", "200")] + 1  # a counter only grows


@pytest.mark.surface("agent:host-facts")
@pytest.mark.parametrize(
    "listing",
    [
        b"not json",
        b"[]",
        json.dumps({"files": {"a": {"size": "big"}}}).encode(),
        json.dumps({"files": {"a": {"size": -5}, "b": {"size": True}}}).encode(),
        json.dumps({"files": []}).encode(),
    ],
)
def test_a_hostile_tree_listing_gives_no_figure_and_no_crash(figures, tmp_path, listing):
    repo = tmp_path / "nas" / "models--org--m"
    commit = "a" * 40
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    (repo / "trees").mkdir()
    (repo / "trees" / f"{commit}.json").write_bytes(listing)
    (tmp_path / "local").mkdir()
    got = staged_pin({"pin": "p", "repo": "org/m", "revision": "main"}, tmp_path / "local", tmp_path / "nas")
    bad_input(figures, "view-files", refused=got.expected_bytes is None)
    assert got.expected_bytes is None and got.error


@pytest.mark.surface("agent:host-facts")
def test_a_staged_file_of_the_wrong_size_or_a_loop_is_not_counted(tmp_path):
    commit = "b" * 40
    nas = tmp_path / "nas" / "models--org--m"
    (nas / "snapshots" / commit).mkdir(parents=True)
    (nas / "refs").mkdir()
    (nas / "refs" / "main").write_text(commit)
    (nas / "trees").mkdir()
    files = {"a.bin": {"size": 4}, "b.bin": {"size": 4}, "c.bin": {"size": 4}, "skip/x": {"size": 9}}
    (nas / "trees" / f"{commit}.json").write_text(json.dumps({"files": files}))
    snap = tmp_path / "local" / "models--org--m" / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "a.bin").write_bytes(b"1234")
    (snap / "b.bin").write_bytes(b"12")  # short
    os.symlink("c.bin", snap / "c.bin")  # a loop
    got = staged_pin(
        {"pin": "p", "repo": "org/m", "revision": "main", "exclude": ["skip/*"]},
        tmp_path / "local",
        tmp_path / "nas",
    )
    assert (got.expected_bytes, got.staged_bytes, got.expected_files, got.staged_files) == (12, 4, 3, 1)
