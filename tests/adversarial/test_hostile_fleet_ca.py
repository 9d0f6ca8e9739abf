"""The fleet CA's certificate as someone else may have left it: nothing but a certificate travels.

`bootstrap HOST` (with $SPARKFLEET_REGISTRY set) writes the operator's `registry/ca/ca.crt` into
the host's docker and podman trust directories and shows it in its plan; `image push` and
`release cut` hand it to skopeo. Whoever can write the operator's state dir can leave anything
under that name. Each case is bad by the test's own making: a link to a file outside (a secret),
the CA's private key copied over the certificate, a certificate with the key or a secret line
appended, bytes that are no text, a PEM block that is no certificate, a directory, a FIFO, a file
far larger than any CA. The oracle: refused naming ca.crt, and the secret or the key never in
anything shown (the plan, its JSON); a good CA, the control, is planned for the host.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkfleet.base.errors import SparkfleetError
from sparkfleet.cli import main as cli
from sparkfleet.images.registry import make_ca, read_ca_cert
from support.lanefleet import lane_recipe, write_fleet

from .tally import bad_input

SECRET = "SECRET-OUTSIDE-the-fleet-ca"
CASES = ["link-to-a-secret", "the-private-key", "cert-then-key", "cert-then-a-secret-line", "not-text",
         "a-block-that-is-no-certificate", "directory", "fifo", "a-megabyte"]  # fmt: skip


@pytest.fixture
def operator(tmp_path, monkeypatch) -> Path:
    """The operator's state dir with a real fleet CA (`registry init`'s), and a fleet of this machine."""
    state = tmp_path / "operator"
    make_ca(state / "registry" / "ca")
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(state))
    monkeypatch.setenv("SPARKFLEET_REGISTRY", "127.0.0.1:5000")
    return state


def _plant(ca_dir: Path, case: str) -> None:
    crt, key = ca_dir / "ca.crt", ca_dir / "ca.key"
    good, private = crt.read_text(), key.read_text()
    secret = ca_dir.parent / "secret.txt"
    secret.write_text(f"{SECRET}\n")
    crt.unlink()
    if case == "link-to-a-secret":
        crt.symlink_to(secret)
    elif case == "directory":
        crt.mkdir()
    elif case == "fifo":
        os.mkfifo(crt)
    else:
        crt.write_bytes({
            "the-private-key": private.encode(),
            "cert-then-key": (good + private).encode(),
            "cert-then-a-secret-line": (good + f"password = {SECRET}\n").encode(),
            "not-text": b"\xff\xfe" + good.encode(),
            "a-block-that-is-no-certificate": good.replace(good.splitlines()[3], "A" * 64).encode(),
            "a-megabyte": good.encode() * (1 + (1 << 20) // len(good)),
        }[case])  # fmt: skip


def _bootstrap(tmp_path: Path) -> tuple[int, str]:
    host = {"address": "localhost", "ssh_user": "root", "local_hub": str(tmp_path / "hub"),
            "nas_hub": str(tmp_path / "nas"), "state_dir": str(tmp_path / "host-state")}  # fmt: skip
    root = write_fleet(tmp_path / "fleet", {"spark": host}, {"lane": lane_recipe(["spark"])})
    (tmp_path / "host-root").mkdir(exist_ok=True)

    def expire(signum, frame):
        raise TimeoutError("bootstrap hung on the CA file")

    signal.signal(signal.SIGALRM, expire)
    signal.alarm(60)
    try:
        argv = ["--root", str(root), "bootstrap", "spark", "--dry-run", "--json",
                "--root-prefix", str(tmp_path / "host-root")]  # fmt: skip
        res = CliRunner().invoke(cli, argv)
    finally:
        signal.alarm(0)
    assert not isinstance(res.exception, TimeoutError), "bootstrap hung on the CA file"
    return res.exit_code, res.output


def test_a_good_fleet_ca_is_planned_for_the_host(operator, tmp_path):
    code, out = _bootstrap(tmp_path)
    plan = json.loads(out)
    ca = [c for c in plan["changes"] if c["step"] == "fleet-ca"]
    assert code == 0 and ca and "BEGIN CERTIFICATE" in ca[0]["after"], out[-2000:]


@pytest.mark.surface("file:fleet CA", "cli:bootstrap")
@pytest.mark.parametrize("case", CASES)
def test_a_hostile_fleet_ca_is_refused_and_nothing_of_it_is_shown(operator, tmp_path, figures, case):
    ca_dir = operator / "registry" / "ca"
    _plant(ca_dir, case)
    with pytest.raises(SparkfleetError) as refused:
        read_ca_cert(ca_dir / "ca.crt")
    assert str(ca_dir / "ca.crt") in refused.value.message
    code, out = _bootstrap(tmp_path)
    private = (ca_dir / "ca.key").read_text().splitlines()[1]  # a line of the key's own base64
    clean = code not in (0, None) and str(ca_dir / "ca.crt") in out and "Traceback" not in out
    shown = SECRET in out or private in out
    bad_input(figures, "fleet-ca", refused=clean and not shown)
    assert clean, out[-2000:]
    assert not shown, out[-2000:]
