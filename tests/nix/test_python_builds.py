"""Every Python derivation under pkgs/ builds as nixpkgs builds it, checked with pip alone.

nixpkgs' pypa build hook runs `python -m build --no-isolation --wheel` with exactly the
derivation's `build-system` on the path, and refuses a build whose pyproject.toml asks for more
("Missing dependencies"); its runtime-deps check refuses a wheel whose Requires-Dist names a
package `dependencies` lacks. Here, for each derivation (read from its .nix file with the stand-in
Python set, nixpkgs' lib.callPackageWith): the pinned sdist or wheel is downloaded from PyPI as
fetchPypi names it and its sha256 compared with the .nix file's hash; an sdist (or the repository's
own source, for sparkfleet) is built in a fresh venv that holds `build` and the declared
build-system and nothing else; a wheel's native library needs only what the derivation links.

setuptools is installed at the oldest version any NixOS release since 25.05 carries:
nixpkgs' setuptools went 75.8.2 -> 78.1.0 (NixOS/nixpkgs#393554, merged 2025-03, before the 25.05
branch-off; 78.1.1 followed for CVE-2025-47273, #421350) and nixpkgs never moves it back, so the
nixos-26.05 flake.lock follows carries 78.1.0 or later. A bound the floor meets is met there.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from .conftest import REPO, nix_str, nixpkgs_lib, requires_nix, requires_nixpkgs_lib
from .realnix import NixError, RealNix

pytestmark = [pytest.mark.nix, pytest.mark.slow, requires_nix, requires_nixpkgs_lib]

STUBS = Path(__file__).parent / "stubs" / "pkgs.nix"
NIXPKGS_SETUPTOOLS_FLOOR = Version("78.1.0")
SYSTEMS = ("aarch64-linux", "x86_64-linux")
INDEX = "https://pypi.org/simple"
# what nixpkgs' pypa build hook puts beside build-system (pkgs/development/interpreters/python/hooks)
BUILD_FRONTEND = ("build",)


def python_derivations() -> list[str]:
    """pkgs/*.nix files that call buildPythonPackage or buildPythonApplication."""
    call = re.compile(r"\bbuildPython(Package|Application)\s*(rec\s*)?\{")
    return sorted(p.name for p in (REPO / "pkgs").glob("*.nix") if call.search(p.read_text()))


def arguments(nix: RealNix, name: str, system: str = "x86_64-linux") -> dict:
    """The arguments pkgs/<name> gives buildPythonPackage/Application on `system`, called as
    nixpkgs calls it (lib.callPackageWith over pkgs and the Python set: a missing argument fails).
    Nix 2.26 evaluates it: the locked release's lib.fileset (sparkfleet's src) needs Nix >= 2.14."""
    expr = f"""
      let
        s = import {STUBS} {{ nixpkgsLib = {nix_str(nixpkgs_lib())}; }};
        lib = s.lib;
        py = s.python3Packages // {{
          buildPythonPackage = a: a;
          buildPythonApplication = a: a;
          stdenv = s.python3Packages.stdenv // {{ hostPlatform.system = "{system}"; }};
        }};
        f = import {REPO / "pkgs" / name};
        # the repository's own source, for the one whose src is it (pkgs/sparkfleet.nix)
        r = lib.callPackageWith (s // py // {{ python3Packages = py; }}) f
          (builtins.intersectAttrs (builtins.functionArgs f) {{ src = {REPO}; }});
      in {{
        inherit (r) pname version;
        format = r.format or "pyproject";
        fetch = r.src.args or null;
        buildSystem = r.build-system or [ ];
        dependencies = r.dependencies or [ ];
      }}"""
    return nix.eval_json(expr, binds=(REPO, nixpkgs_lib()))


def sri_hex(sri: str) -> str:
    assert sri.startswith("sha256-"), sri
    return base64.b64decode(sri.removeprefix("sha256-")).hex()


def fetch_from_pypi(project: str, filename: str, dest: Path) -> Path:
    """`filename` of `project` from PyPI's simple index (its JSON form), checked against the
    index's own sha256 on the way (the .nix file's hash is compared by the caller)."""
    request = urllib.request.Request(
        f"{INDEX}/{canonicalize_name(project)}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            files = json.load(resp)["files"]
        matches = [f for f in files if f["filename"] == filename]
        assert len(matches) == 1, f"PyPI has no {filename} for {project}"
        entry = matches[0]
        with urllib.request.urlopen(entry["url"], timeout=300) as resp:
            data = resp.read()
    except urllib.error.URLError as exc:
        pytest.skip(f"PyPI is not reachable ({exc.reason})")
    assert hashlib.sha256(data).hexdigest() == entry["hashes"]["sha256"]
    dest.mkdir(parents=True, exist_ok=True)
    (dest / filename).write_bytes(data)
    return dest / filename


def names(requirements: list[str]) -> set[str]:
    """Package names of Nix strings ("httpx", "tool_eval_bench==3.0.0") or requirement lines."""
    return {canonicalize_name(re.match(r"[A-Za-z0-9_.-]+", r).group(0)) for r in requirements}


def requires_dist(metadata: str) -> set[str]:
    """The wheel's Requires-Dist that apply on Linux without an extra, by name (what nixpkgs'
    runtime-deps check evaluates: `tzdata; sys_platform == 'win32'` is not one)."""
    found = set()
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist:"):
            req = Requirement(line.split(":", 1)[1].strip())
            if req.marker is None or req.marker.evaluate({"extra": "", "sys_platform": "linux"}):
                found.add(canonicalize_name(req.name))
    return found


def build_venv(dest: Path, requirements: list[str]) -> Path:
    """A venv holding the build frontend and `requirements` (with their own dependencies), no pip."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True)
    python = dest / "bin" / "python"
    pins = [f"setuptools=={NIXPKGS_SETUPTOOLS_FLOOR}" if r == "setuptools" else r for r in requirements]
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", *BUILD_FRONTEND, *pins],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr[-3000:]
    return python


def build_wheel(python: Path, source: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """What nixpkgs' pypa build hook runs: `python -m build --no-isolation --wheel`."""
    return subprocess.run(
        [str(python), "-m", "build", "--no-isolation", "--wheel", "--outdir", str(out), str(source)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def wheel_metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as z:
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        return z.read(meta).decode()


def test_the_python_derivations_are_found() -> None:
    assert python_derivations() == ["smg.nix", "sparkfleet.nix", "tool-eval-bench.nix"]


def sdist_source(args: dict, tmp_path: Path) -> Path:
    """The pinned sdist, fetched as fetchPypi names it, hash-checked, unpacked."""
    fetch = args["fetch"]
    filename = f"{fetch['pname']}-{fetch['version']}.tar.gz"  # fetchPypi's default: an sdist
    sdist = fetch_from_pypi(args["pname"], filename, tmp_path / "dl")
    assert hashlib.sha256(sdist.read_bytes()).hexdigest() == sri_hex(fetch["hash"]), filename
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path / "src", filter="data")
    (top,) = (tmp_path / "src").iterdir()
    return top


def repository_source(tmp_path: Path) -> Path:
    """pkgs/sparkfleet.nix's src: lib.fileset.toSource of pyproject.toml, README.md and python/."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(
        REPO / "python", src / "python", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    return src


@pytest.mark.parametrize("name", [n for n in python_derivations() if n != "smg.nix"])
def test_source_builds_with_exactly_the_declared_build_system(
    real_nix: RealNix, tmp_path: Path, name: str
) -> None:
    args = arguments(real_nix, name)
    assert args["format"] == "pyproject"
    source = repository_source(tmp_path) if args["fetch"] is None else sdist_source(args, tmp_path)
    wanted = tomllib.loads((source / "pyproject.toml").read_text())["build-system"]["requires"]
    python = build_venv(tmp_path / "venv", args["buildSystem"])
    built = build_wheel(python, source, tmp_path / "dist")
    assert built.returncode == 0, (
        f"pkgs/{name}: build-system {args['buildSystem']} cannot build what pyproject.toml asks for "
        f"({wanted}):\n{built.stdout[-1500:]}{built.stderr[-1500:]}"
    )
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    assert wheel.name.startswith(f"{canonicalize_name(args['pname']).replace('-', '_')}-{args['version']}-")
    # nixpkgs' runtime-deps check: every Requires-Dist is among `dependencies`
    missing = requires_dist(wheel_metadata(wheel)) - names(args["dependencies"])
    assert not missing, f"pkgs/{name}: the wheel requires {sorted(missing)}, which `dependencies` lacks"


@pytest.mark.parametrize("name", [n for n in python_derivations() if n != "smg.nix"])
def test_setuptools_bound_is_met_by_nixpkgs(real_nix: RealNix, tmp_path: Path, name: str) -> None:
    """The source's setuptools bound, against the oldest setuptools the locked NixOS release can carry."""
    args = arguments(real_nix, name)
    source = repository_source(tmp_path) if args["fetch"] is None else sdist_source(args, tmp_path)
    requires = [
        Requirement(r)
        for r in tomllib.loads((source / "pyproject.toml").read_text())["build-system"]["requires"]
    ]
    (setuptools,) = [r for r in requires if r.name == "setuptools"]
    assert setuptools.specifier.contains(NIXPKGS_SETUPTOOLS_FLOOR), (
        f"{name}: {setuptools} > nixpkgs' {NIXPKGS_SETUPTOOLS_FLOOR}"
    )


def test_smg_wheels_are_pinned_by_the_hash_pypi_serves(real_nix: RealNix, tmp_path: Path) -> None:
    """pkgs/smg.nix: a wheel per system, fetched as fetchPypi names it, its sha256 the .nix file's;
    its dependencies the wheel's own Requires-Dist; its version pyproject's pin (the gateway and
    test extras); the Rust router inside needs only glibc and libgcc_s (autoPatchelfHook's inputs)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    pins = {d for d in extras["gateway"] + extras["test"] if d.startswith("smg")}
    for system in SYSTEMS:
        args = arguments(real_nix, "smg.nix", system)
        src = args["fetch"]
        assert args["format"] == "wheel" and src["format"] == "wheel"
        assert pins == {f"smg=={args['version']}"}, pins  # one version everywhere
        filename = f"{src['pname']}-{src['version']}-{src['python']}-{src['abi']}-{src['platform']}.whl"
        wheel = fetch_from_pypi("smg", filename, tmp_path / system)
        assert hashlib.sha256(wheel.read_bytes()).hexdigest() == sri_hex(src["hash"]), system
        assert requires_dist(wheel_metadata(wheel)) == names(args["dependencies"])
        with zipfile.ZipFile(wheel) as z:
            so = z.extract("smg/smg_rs.abi3.so", tmp_path / f"{system}-so")
        if shutil.which("readelf"):
            dyn = subprocess.run(["readelf", "-d", so], capture_output=True, text=True, check=True).stdout
            needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn))
            glibc = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1"}
            loaders = {"ld-linux-aarch64.so.1", "ld-linux-x86-64.so.2"}
            assert needed - glibc - {"libgcc_s.so.1"} <= loaders, needed
            assert "libgcc_s.so.1" in needed  # why buildInputs carries gcc's lib output


def test_smg_refuses_a_system_pypi_has_no_wheel_for(real_nix: RealNix) -> None:
    with pytest.raises(NixError, match="smg 1.13.0: PyPI has no wheel for riscv64-linux"):
        arguments(real_nix, "smg.nix", "riscv64-linux")
