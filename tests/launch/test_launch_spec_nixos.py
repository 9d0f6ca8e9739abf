"""GPU access per host: CDI on NixOS hosts, `--gpus all` on DGX OS, from one recipe.

On NixOS the NVIDIA container toolkit exposes the GPU through CDI only; `--gpus all` fails there
(nixpkgs#340386). A lane can span NixOS and DGX OS hosts, so the choice follows each host's `os`
in hosts/fleet.toml rather than the recipe.
"""

from __future__ import annotations

from pathlib import Path

from test_launch_spec import make_inv, specs

from sparkfleet.launch.runtimes import container_run_argv


def test_nixos_host_gets_cdi_and_dgx_os_host_gets_gpus_all(tmp_path: Path) -> None:
    inv = make_inv(tmp_path, dgx2={"os": "nixos"})
    s = specs(inv)
    nixos = container_run_argv(s["dgx2"], "docker", Path("/e"))
    assert "--gpus" not in nixos
    assert nixos[nixos.index("nvidia.com/gpu=all") - 1] == "--device"
    dgx_os = container_run_argv(s["dgx1"], "docker", Path("/e"))
    assert dgx_os[dgx_os.index("--gpus") + 1] == "all" and "nvidia.com/gpu=all" not in dgx_os


def test_gpus_none_stays_none_on_nixos(tmp_path: Path) -> None:
    from test_launch_spec import TP4

    recipe = TP4.replace('fabric = "roce"', 'fabric = "roce"\ngpus = "none"')
    inv = make_inv(tmp_path, recipe, dgx2={"os": "nixos"})
    argv = container_run_argv(specs(inv)["dgx2"], "docker", Path("/e"))
    assert "--gpus" not in argv and "nvidia.com/gpu=all" not in argv
