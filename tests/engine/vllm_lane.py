"""A lane whose command is the real `vllm serve` (the engine venv's CLI) of the tiny Qwen2.

Shared by the LocalHost launch (test_engine_launch.py) and the namespace fleet
(test_engine_fleet.py): the same recipe, the process runtime, ready on vLLM's own
"Application startup complete." line, the model served by repo id from the NAS hub cache.
"""

from __future__ import annotations

import json
from pathlib import Path


def vllm_recipe(vllm: Path, hub: Path, repo: str, port: int, hosts: tuple[str, ...] = ("spark",),
                bind: str = "127.0.0.1", key_guard: bool = True) -> str:  # fmt: skip
    """`key_guard`: pass vLLM sparkfleet's key guard (its own key guards only /v1 paths)."""
    env = [
        f"HF_HUB_CACHE={hub}", "HF_HUB_OFFLINE=1", "VLLM_TARGET_DEVICE=cpu", "VLLM_CPU_KVCACHE_SPACE=1",
        "VLLM_CPU_OMP_THREADS_BIND=nobind", "OMP_NUM_THREADS=1", "VLLM_NO_USAGE_STATS=1",
    ]  # fmt: skip
    command = [
        "env", *env, str(vllm), "serve", repo, "--host", bind, "--port", "{port}",
        "--served-model-name", "{served_model_name}", "--max-model-len", "2048", "--max-num-seqs", "4",
        "--dtype", "bfloat16", "--enforce-eager",
        *(["--middleware", "{vllm_key_guard}"] if key_guard else []),
    ]  # fmt: skip
    return f"""
[lane]
hosts = {json.dumps(list(hosts))}

[world]
tp = 1

[launch]
runtime = "process"
port = {port}
served_model_name = "{repo}"
fabric = "none"
command = {json.dumps(command)}
ready_signatures = ["Application startup complete."]
receipt_roots = []
[launch.timeouts]
ready_s = 900
poll_s = 1.0
stop_s = 30

[[models]]
pin = "tiny"
"""


def tiny_pin(repo: str) -> str:
    return f'\n[pins.tiny]\nkind = "hf"\nrepo = "{repo}"\nrevision = "main"\n'


def engine_cores(pid: int) -> list[int]:
    """vLLM's EngineCore child among the lane's own process-group members (by PID, never by name
    across the machine: only this group's members are read)."""
    from sparkfleet.base.procs import group_members

    return [p for p in group_members(pid) if b"EngineCore" in Path(f"/proc/{p}/cmdline").read_bytes()]
