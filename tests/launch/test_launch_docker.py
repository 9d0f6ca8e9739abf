"""The docker/podman runtime against a real engine, when one is here (never on the CI box).

Needs an engine on PATH and a local image named by digest in $SPARKFLEET_TEST_IMAGE (nothing is
pulled: the tests never touch the network). The argv itself is asserted exactly in
test_launch_spec.py, which always runs.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from sparkfleet.launch.records import LaunchRecord
from sparkfleet.launch.runtimes import ContainerRuntime
from sparkfleet.launch.spec import LaunchSpec

ENGINE = next((e for e in ("docker", "podman") if shutil.which(e)), None)
IMAGE = os.environ.get("SPARKFLEET_TEST_IMAGE")

pytestmark = pytest.mark.skipif(
    ENGINE is None or not IMAGE,
    reason="no docker/podman engine here"
    if ENGINE is None
    else "set SPARKFLEET_TEST_IMAGE=<local image@digest>",
)


def test_container_start_state_stop(tmp_path):
    spec = LaunchSpec(
        lane="dockertest", host="local", rank=0, nnodes=1, runtime=ENGINE or "docker",
        name=f"sparkfleet-dockertest-{os.getpid()}-r0", image=IMAGE, argv=("sleep", "60"),
        env={"NODE_RANK": "0"}, binds=(), devices=(), port=1, gpus="none", shm_size="64m",
        state_dir=str(tmp_path / "state"), cache_dir=str(tmp_path / "cache"), receipt_roots=(),
        labels={"sparkfleet.lane": "dockertest", "sparkfleet.rank": "0"},
    )  # fmt: skip
    rt = ContainerRuntime(spec.runtime)
    rec: LaunchRecord = rt.start(spec)
    try:
        assert rec.container_id and rt.state(rec).running
        assert Path(rec.log_path).with_suffix(".env").stat().st_mode & 0o777 == 0o600
    finally:
        res = rt.stop(rec, 5)
    assert res.stopped and not rt.state(rec).running
