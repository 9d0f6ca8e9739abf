"""The gateway's front (nginx) and the per-user key files, without a running lane: modes, names, the
generated config as nginx itself reads it (`nginx -t`), and `gateway run --json`."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkfleet.cli import main as cli
from sparkfleet.serving import front, gateway, users

try:
    from support.localgateway import LANE, free_port, request, write_gateway_fleet
except ImportError:  # tests/ imported as a package
    from tests.support.localgateway import LANE, free_port, request, write_gateway_fleet


def test_keys_add_list_revoke_keep_every_file_private(tmp_path):
    state = tmp_path / "gw"
    env = {"SPARKFLEET_GATEWAY_STATE": str(state)}
    res = CliRunner(env=env).invoke(cli, ["keys", "add", "bob", "--out", str(tmp_path / "bob.key")])
    assert res.exit_code == 0, res.output
    key = (tmp_path / "bob.key").read_text().strip()
    assert key not in res.output  # --out: written, not shown
    for path, mode in [(state, 0o700), (state / "users", 0o700), (state / "users" / "bob.key", 0o600),
                       (state / "front", 0o700), (state / "front" / "users.conf", 0o600),
                       (tmp_path / "bob.key", 0o600)]:  # fmt: skip
        assert path.stat().st_mode & 0o777 == mode, path
    conf = (state / "front" / "users.conf").read_text()
    assert f'"~^Bearer\\s+{key}$" "bob";' in conf and '"operator";' in conf
    assert CliRunner(env=env).invoke(cli, ["keys", "add", "operator"]).exit_code != 0  # reserved
    assert CliRunner(env=env).invoke(cli, ["keys", "add", "../x"]).exit_code != 0
    listed = CliRunner(env=env).invoke(cli, ["keys", "list", "--json"])
    assert [u["user"] for u in json.loads(listed.output)] == ["bob"] and key not in listed.output
    assert CliRunner(env=env).invoke(cli, ["keys", "revoke", "bob"]).exit_code == 0
    assert key not in (state / "front" / "users.conf").read_text()
    assert CliRunner(env=env).invoke(cli, ["keys", "revoke", "bob"]).exit_code != 0

    (state / "users" / "eve.key").write_text("sk-sf-" + "e" * 40 + "\n")
    (state / "users" / "eve.key").chmod(0o644)  # readable by others: refused, not used
    files = users.key_files(state)
    assert files.admitted == {} and "not a 0600 regular file" in files.refused["eve"]


def test_front_config_is_valid_nginx_and_carries_no_key_outside_users_conf(tmp_path):
    nginx = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
    if nginx is None:
        pytest.fail("nginx is a test dependency (Makefile DEB_PACKAGES: nginx-light)")
    state = tmp_path / "gw"
    key, admin = gateway.gateway_key(state), gateway.admin_key(state)
    users.add(state, "alice")
    p = front.write(state, key, admin, "127.0.0.1", free_port(), free_port())
    for secret in (key, admin):
        assert secret not in p.conf.read_text() and secret in p.users_conf.read_text()
    assert re.search(r"proxy_set_header Authorization \$sparkfleet_upstream_auth;", p.conf.read_text())
    check = subprocess.run([*front.argv(p, nginx), "-t", "-q"], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr
    with pytest.raises(Exception, match="letters, digits"):
        front.users_conf_text('bad"key with spaces', admin, {})


HOSTILE_DIR_NAMES = ["state dir", "quo'te\"s", "dollar $HOME", "semi;colon {brace}", "back\\slash"]


@pytest.mark.parametrize("name", HOSTILE_DIR_NAMES)
def test_front_config_holds_no_state_dir_path_so_any_dir_name_passes_nginx_t(tmp_path, name):
    """A state dir with a space made `nginx -t` fail ("invalid number of arguments in pid
    directive"): every path in nginx.conf is now relative to the prefix nginx is given in argv."""
    nginx = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
    if nginx is None:
        pytest.fail("nginx is a test dependency (Makefile DEB_PACKAGES: nginx-light)")
    state = tmp_path / name / "gw"
    key, admin = gateway.gateway_key(state), gateway.admin_key(state)
    p = front.write(state, key, admin, "127.0.0.1", free_port(), free_port())
    assert str(tmp_path) not in p.conf.read_text()
    check = subprocess.run([*front.argv(p, nginx), "-t"], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr
    assert f"{p.root}/nginx.conf test is successful" in check.stderr


def test_front_refuses_a_bind_that_is_not_an_ip_address(tmp_path):
    state = tmp_path / "gw"
    key, admin = gateway.gateway_key(state), gateway.admin_key(state)
    for bind in ("127.0.0.1:80; include /etc/shadow", "localhost", "", "::1 x"):
        with pytest.raises(Exception, match="listens on an IP address"):
            front.write(state, key, admin, bind, 8080, 9090)
    assert not (state / "front" / "nginx.conf").exists()  # refused before anything was written


def test_gateway_main_starts_under_a_wrapper_that_adds_site_dirs_only_in_its_script(tmp_path):
    """The deployed unit's `gateway run` under nixpkgs' wrapper: the interpreter is bare, and the
    script itself adds sparkfleet's and smg's site dirs (site.addsitedir, as nixpkgs' wrap.sh
    patches every Python application's script). gateway_main, started from there as `gateway run`
    starts it, still imports sparkfleet and smg (here smg answers `--help` and exits 0)."""
    bare = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    own = subprocess.run([bare, "-c", "import json, sys; print(json.dumps(sys.path))"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    if subprocess.run([bare, "-c", "import sparkfleet"], capture_output=True).returncode == 0:
        pytest.skip(f"{bare} imports sparkfleet by itself: no bare interpreter to start from")
    added = [p for p in sys.path if p and Path(p).is_dir() and p not in json.loads(own.stdout)]
    config = tmp_path / "gateway.json"
    config.write_text(json.dumps({"argv": ["--help"]}))
    script = (
        "import os, site\n"
        f"for d in {added!r}:\n    site.addsitedir(d)\n"
        "from pathlib import Path\n"
        "from sparkfleet.serving import gateway\n"
        f"argv, env = gateway.main_command(Path({str(config)!r}))\n"
        "os.execve(argv[0], argv, env)\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([bare, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "No module named" not in proc.stderr and "--policy" in proc.stdout  # smg's own help


def test_gateway_run_json_reports_what_it_found_before_it_becomes_the_gateway(tmp_path):
    """`gateway run --json` (the unit's ExecStart): one JSON document first, then the gateway itself."""
    inv = write_gateway_fleet(tmp_path, free_port(), tmp_path / "host-state")  # its lane not running
    state = tmp_path / "gw"
    port = free_port()
    argv = [sys.executable, "-m", "sparkfleet", "--root", str(inv.root), "gateway", "run",
            "--port", str(port), "--bind", "127.0.0.1", "--json"]  # fmt: skip
    proc = subprocess.Popen(argv, env={**os.environ, "SPARKFLEET_GATEWAY_STATE": str(state)},
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    try:
        text = ""
        while True:
            line = proc.stdout.readline()
            assert line, f"no JSON document before the end of output: {text!r}"
            text += line
            if line.startswith("}"):
                break
        st = json.loads(text)
        assert st["pid"] == proc.pid and st["port"] == port and st["policy"] == "round_robin"
        assert st["lanes"] == {LANE: "not answering (the gateway adds it once it is up)"}
        assert st["key_changed"] == {LANE: True} and st["key_failed"] == {}
        assert any("now holds the gateway's key" in e for e in st["events"])
        deadline = time.monotonic() + 30
        models = f"http://127.0.0.1:{port}/v1/models"
        while request(models, gateway.gateway_key(state), timeout=2).status is None:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        assert gateway.status(state)["pid"] == proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def test_gateway_run_ends_on_ctrl_c_in_one_line_and_its_front_with_it(tmp_path):
    """Ctrl-C on `gateway run` in a terminal: smg stops on SIGINT, then Python raised the interrupt
    it had noted meanwhile, and the operator got a traceback out of smg's launcher."""
    inv = write_gateway_fleet(tmp_path, free_port(), tmp_path / "host-state")
    state = tmp_path / "gw"
    port = free_port()
    argv = [sys.executable, "-m", "sparkfleet", "--root", str(inv.root), "gateway", "run",
            "--port", str(port), "--bind", "127.0.0.1"]  # fmt: skip
    proc = subprocess.Popen(argv, env={**os.environ, "SPARKFLEET_GATEWAY_STATE": str(state)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline, models = time.monotonic() + 30, f"http://127.0.0.1:{port}/v1/models"
        while request(models, gateway.gateway_key(state), timeout=2).status is None:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        front_pid = int(front.paths(state).pid.read_text().split()[0])
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert err.rstrip().splitlines()[-1] == "gateway stopped (Ctrl-C)"
    deadline = time.monotonic() + 10
    while _is_nginx(front_pid):  # its front goes with it (SIGTERM on its parent's death)
        assert time.monotonic() < deadline, f"the front (nginx, pid {front_pid}) outlived the gateway"
        time.sleep(0.1)
    assert not gateway.status(state)["running"]


def _is_nginx(pid: int) -> bool:
    try:
        return b"nginx" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
