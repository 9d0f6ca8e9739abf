"""Host fingerprints from the tools' real output formats (a scripted runner), drift against fleet.toml."""

from __future__ import annotations

from sparkfleet.remote.hosts import LocalHost, RunResult
from sparkfleet.remote.hoststack import HostFingerprint, collect_fingerprint, drift

NVSMI_BANNER = """Mon Nov 30 14:00:00 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |
|-----------------------------------------+------------------------+----------------------+
"""
IBSTAT = """CA 'rocep1s0f1'
	CA type: MT4129
	Number of ports: 1
	Firmware version: 28.45.1200
"""


class ScriptedHost:
    """A HostRunner answering known argv with canned output; anything else is 'command not found'."""

    def __init__(self, name: str, answers: dict[tuple[str, ...], str]) -> None:
        self.name = name
        self.answers = answers
        self.asked: list[tuple[str, ...]] = []

    def run(self, argv, *, input=None, timeout=None):  # noqa: A002 - HostRunner signature
        self.asked.append(tuple(argv))
        out = self.answers.get(tuple(argv))
        if out is None:
            return RunResult(self.name, tuple(argv), 127, "", f"{argv[0]}: command not found")
        return RunResult(self.name, tuple(argv), 0, out, "")

    def stream(self, argv):
        raise NotImplementedError


SPARK = {
    ("uname", "-r"): "6.17.0-1014-nvidia\n",
    ("nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,clocks.max.mem,power.limit",
     "--format=csv,noheader"): "580.95.05, 3003 MHz, [N/A], 140.00 W\n",
    ("nvidia-smi",): NVSMI_BANNER,
    ("ls", "-1", "/sys/class/infiniband"): "rocep1s0f0\nrocep1s0f1\nroceP2p1s0f0\n",
    ("cat", "/sys/class/infiniband/rocep1s0f0/fw_ver"): "28.45.1200\n",
    ("cat", "/sys/class/infiniband/rocep1s0f1/fw_ver"): "28.45.1200\n",
    ("cat", "/sys/class/infiniband/roceP2p1s0f0/fw_ver"): "28.45.1200\n",
    ("cat", "/proc/meminfo"): "MemTotal:       125419764 kB\nMemAvailable:   98765432 kB\n",
    ("docker", "image", "inspect", "--format", "{{.Id}} {{json .Config.Env}}", "lane@sha256:ab"):
        'sha256:5e1f00d ["PATH=/usr/bin","NCCL_VERSION=2.28.3-1","CUDA_VERSION=13.0.1"]\n',
}  # fmt: skip


def test_full_spark_fingerprint():
    fp = collect_fingerprint(ScriptedHost("dgx1", SPARK), "lane@sha256:ab")
    assert fp == HostFingerprint(
        host="dgx1", kernel="6.17.0-1014-nvidia", driver="580.95.05", cuda="13.0", nccl="2.28.3-1",
        firmware="28.45.1200", gpu_clocks="sm 3003 MHz", power_mode="power limit 140.00 W",
        mem_available_bytes=98765432 * 1024, image_id="sha256:5e1f00d",
    )  # fmt: skip
    d = fp.to_dict()
    assert set(d) == {"host", "kernel", "driver", "cuda", "nccl", "firmware", "gpu_clocks", "power_mode",
                      "mem_available_bytes", "image_id"}  # fmt: skip
    assert HostFingerprint.from_dict(d) == fp


def test_mixed_firmware_named_per_hca_and_ibstat_fallback():
    mixed = {**SPARK, ("cat", "/sys/class/infiniband/rocep1s0f1/fw_ver"): "28.41.1000\n"}
    fp = collect_fingerprint(ScriptedHost("dgx2", mixed), None)
    assert fp.firmware == "roceP2p1s0f0=28.45.1200,rocep1s0f0=28.45.1200,rocep1s0f1=28.41.1000"
    assert fp.image_id is None and fp.nccl is None
    no_sysfs = {k: v for k, v in SPARK.items() if k[0] != "ls"} | {("ibstat",): IBSTAT}
    assert collect_fingerprint(ScriptedHost("dgx3", no_sysfs), None).firmware == "28.45.1200"


def test_missing_tools_give_none_not_a_crash():
    fp = collect_fingerprint(ScriptedHost("bare", {("uname", "-r"): "6.1.0-28-amd64\n"}), "img@sha256:00")
    assert fp.kernel == "6.1.0-28-amd64"
    assert (fp.driver, fp.cuda, fp.nccl, fp.firmware, fp.image_id, fp.mem_available_bytes) == (None,) * 6


def test_this_machine_really():
    fp = collect_fingerprint(LocalHost("here"), None)
    assert fp.kernel and fp.mem_available_bytes and fp.mem_available_bytes > 0


def test_drift_names_every_difference():
    fp = collect_fingerprint(ScriptedHost("dgx2", SPARK), "lane@sha256:ab")
    declared = {"kernel": "6.17.0-1014-nvidia", "driver": "580.*", "cuda": "13.0", "nccl": "2.28.3-1",
                "firmware": "28.45.1200"}  # fmt: skip
    assert drift(declared, fp) == []
    bad = {**declared, "kernel": "6.17.0-1013-nvidia", "nccl": "2.27.*"}
    assert [str(d) for d in drift(bad, fp)] == [
        "dgx2: kernel is 6.17.0-1014-nvidia, declared 6.17.0-1013-nvidia",
        "dgx2: nccl is 2.28.3-1, declared 2.27.*",
    ]
    unknown = collect_fingerprint(ScriptedHost("dgx4", {("uname", "-r"): "7.0.0-1019-nvidia\n"}), None)
    assert [str(d) for d in drift({"driver": "580.95.05"}, unknown)] == [
        "dgx4: driver is unknown (could not be read), declared 580.95.05"
    ]


def test_launch_says_matches_only_for_hosts_that_declare_a_stack():
    """The demo (no [stack] anywhere) printed "host stack: matches the declared stack"."""
    from types import SimpleNamespace as NS

    from sparkfleet.launch.preflight import stack_verdict

    bare, declared = NS(name="dgx1", stack={}), NS(name="dgx2", stack={"kernel": "6.11"})
    assert stack_verdict([bare], []).startswith("no stack declared")
    assert "match" not in stack_verdict([bare], [])
    assert stack_verdict([declared, bare], []) == (
        "dgx2 match the declared stack; no stack declared for dgx1"
    )
    assert stack_verdict([declared], ["dgx2: kernel 6.12"]).startswith("DRIFT allowed")
