"""Issue 10.15: modes are explicit (never the caller's umask) and env files do not outlive the lane.

Before: hub folders were 0777 under umask 000, a pre-existing env file kept its looser mode, and
the env file holding the lane's secrets stayed on disk after `stop`.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

from sparkfleet.base import atomic
from sparkfleet.lane.spec import LaunchSpec
from sparkfleet.node.runtimes import ContainerRuntime

FAKE_ENGINE = r'''#!{python}
"""A stand-in container CLI for the env-file lifecycle (the real engines run in test_launch_docker.py)."""
import json, sys
args = sys.argv[1:]
log = open({calls!r}, "a")
log.write(json.dumps(args) + "\n")
if args[:2] == ["image", "inspect"]:
    sys.exit(0)
if args[0] == "run":
    env_file = args[args.index("--env-file") + 1]
    log.write(json.dumps({{"env_file_text": open(env_file).read()}}) + "\n")
    print("c0ffee")
elif args[0] == "inspect":
    labels = {{"sparkfleet.lane": "modes"}}
    print(json.dumps([{{"State": {{"Running": True}}, "Config": {{"Labels": labels}}}}]))
'''


def _modes(root: Path) -> dict[str, int]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            st = p.lstat()
            if not stat.S_ISLNK(st.st_mode):
                out[str(p.relative_to(root))] = stat.S_IMODE(st.st_mode)
    return out


def test_a_pre_existing_looser_env_file_is_tightened(tmp_path):
    env_file = tmp_path / "rank0.env"
    env_file.write_text("HF_TOKEN=hf_secret\n")
    os.chmod(env_file, 0o666)
    atomic.write_bytes(env_file, b"HF_TOKEN=hf_secret\n", mode=0o600)  # same bytes: nothing rewritten
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    atomic.write_bytes(env_file, b"HF_TOKEN=hf_other\n", mode=0o600)
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600


def test_env_file_is_0600_under_umask_000_and_removed_at_stop(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls.jsonl"
    engine = bindir / "docker"
    engine.write_text(FAKE_ENGINE.format(python=sys.executable, calls=str(calls)))
    engine.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    spec = LaunchSpec(
        lane="modes", host="local", rank=0, nnodes=1, runtime="docker", name="sparkfleet-modes-r0",
        image="x/y@sha256:" + "0" * 64, argv=("serve",), env={"NODE_RANK": "0", "HF_TOKEN": "hf_secret"},
        binds=(), devices=(), port=1, gpus="none", shm_size="64m", state_dir=str(tmp_path / "state"),
        cache_dir=str(tmp_path / "state" / "cache" / "modes"), receipt_roots=(),
        labels={"sparkfleet.lane": "modes", "sparkfleet.rank": "0"},
    )  # fmt: skip
    rt = ContainerRuntime("docker")
    old = os.umask(0)
    try:
        rec = rt.start(spec)
    finally:
        os.umask(old)
    env_file = Path(rec.log_path).with_suffix(".env")
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    seen = [json.loads(line) for line in calls.read_text().splitlines()]
    assert {"env_file_text": "NODE_RANK=0\nHF_TOKEN=hf_secret\n"} in seen
    result = rt.stop(rec, 1)
    assert result.stopped
    assert not env_file.exists()
