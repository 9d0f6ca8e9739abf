"""The canary's own account of a rank's env and of what NCCL decided.

The NCCL log read here is NCCL 2.28.9's own INFO output from one H200 (world 1) with the TP4
recipe's settings and an NCCL_IB_HCA naming no device: benchmarks/nccl_canary.py runs the same
checks where GPUs are. The two-rank run is the worker itself on loopback with gloo.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkfleet.base.http import free_port
from sparkfleet.launch.preflight import judge_canary
from sparkfleet.node import canary_worker as cw

LOG = Path(__file__).parent / "data" / "nccl-2.28.9-h200-world1-info.log"
NAMES = ["eth0", "enp1s0f0np0", "lo"]


def test_socket_ifname_follows_nccls_prefix_exact_and_exclude_rules():
    assert cw.ifname_matches("enp1", NAMES) == ["enp1s0f0np0"]
    assert cw.ifname_matches("=enp1", NAMES) == []  # exact names only
    assert cw.ifname_matches("=eth0,lo", NAMES) == ["eth0", "lo"]
    assert cw.ifname_matches("^lo,docker", NAMES) == ["eth0", "enp1s0f0np0"]


def test_a_socket_ifname_that_selects_nothing_is_named_with_the_hosts_interfaces():
    problems = cw.env_problems({"NCCL_SOCKET_IFNAME": "enP2p1s0f1np1"}, NAMES, "nccl", 1)
    assert problems == ["NCCL_SOCKET_IFNAME=enP2p1s0f1np1 selects no interface on this host "
                        "(it has eth0, enp1s0f0np0, lo)"]  # fmt: skip
    assert cw.env_problems({"NCCL_SOCKET_IFNAME": "enp1"}, NAMES, "nccl", 1) == []
    # gloo lanes read only gloo's variable
    assert cw.env_problems({"NCCL_SOCKET_IFNAME": "nosuch"}, NAMES, "gloo", None) == []


def test_a_rank_that_sees_no_gpu_or_too_few_says_which_devices_it_was_given():
    assert cw.env_problems({"CUDA_VISIBLE_DEVICES": "7"}, NAMES, "nccl", 0) == [
        "no GPU visible to this rank (CUDA_VISIBLE_DEVICES=7)"
    ]
    assert cw.env_problems({"LOCAL_RANK": "1"}, NAMES, "nccl", 1) == [
        "LOCAL_RANK=1 but only 1 GPU(s) visible (CUDA_VISIBLE_DEVICES unset)"
    ]


def test_nccls_own_log_shows_the_recipes_settings_and_the_fall_to_sockets():
    summary = cw.summarize_nccl_log(LOG.read_text())
    assert summary["network"] == "Socket"
    # what NCCL itself says it took from the environment (the TP4 recipe's settings)
    assert summary["env"]["NCCL_P2P_DISABLE"] == "1"
    assert summary["env"]["NCCL_CUMEM_ENABLE"] == "0"
    assert summary["env"]["NCCL_NVLS_ENABLE"] == "0"
    assert summary["env"]["NCCL_IB_HCA"] == "=mlx5_nosuch"
    said = cw.nccl_fallback({"NCCL_IB_HCA": "=mlx5_nosuch"}, summary)
    assert said == ("NCCL_IB_HCA==mlx5_nosuch but NCCL fell back to sockets "
                    "(network Socket; NET/IB found no device)")
    assert cw.nccl_fallback({}, summary) is None  # no HCA asked for: sockets are what was meant


def test_nccls_warnings_are_kept_verbatim():
    text = LOG.read_text() + "\nvm:1:1 [0] NCCL WARN Bootstrap : no socket interface found\n"
    assert cw.summarize_nccl_log(text)["warnings"] == ["Bootstrap : no socket interface found"]


@pytest.mark.slow
def test_a_rank_with_a_wrong_socket_ifname_fails_the_canary_in_time_and_is_named_first():
    port = free_port()
    timeout = 6.0
    procs = []
    started = time.monotonic()
    for rank, extra in ((0, {}), (1, {"GLOO_SOCKET_IFNAME": "nosuch0"})):
        env = {k: v for k, v in os.environ.items() if k != "GLOO_SOCKET_IFNAME"} | extra
        argv = [sys.executable, cw.__file__, "--rank", str(rank), "--world", "2", "--master", "127.0.0.1",
                "--port", str(port), "--backend", "gloo", "--bytes", "4096", "--iters", "1",
                "--timeout", str(timeout)]  # fmt: skip
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True))
    answers = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        answers.append({"host": f"h{len(answers)}", **json.loads(out.strip().splitlines()[-1])})
    elapsed = time.monotonic() - started
    assert not any(a["ok"] for a in answers)
    assert answers[1]["stage"] == "env"
    report = judge_canary(answers, {0: "h0", 1: "h1"}, "gloo", 0.0)
    assert not report.ok
    assert report.problems[0].startswith("rank 1 on h1: env: GLOO_SOCKET_IFNAME=nosuch0 selects no interface")
    assert "(waiting for rank 1)" in report.problems[1]
    assert elapsed < timeout + 60  # the timeout, plus importing torch on a loaded 2-core machine
