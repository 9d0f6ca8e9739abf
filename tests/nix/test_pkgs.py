"""pkgs/*.nix called with stand-ins for nixpkgs' builders (tests/nix/stubs/pkgs.nix): what each
derivation would be built from, read without nixpkgs. Needs NIXPKGS_LIB for nixpkgs' lib."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

from .conftest import (
    REPO,
    NixEvalError,
    nix_eval,
    nix_str,
    nixpkgs_lib,
    requires_nix,
    requires_nixpkgs_lib,
    store_writable,
)

pytestmark = [pytest.mark.nix, requires_nix, requires_nixpkgs_lib]

STUBS = Path(__file__).parent / "stubs" / "pkgs.nix"
FLEET_LIB = REPO / "modules" / "lib" / "fleet.nix"
COMMIT = "cad252b7d3" + "0" * 30
DIGEST = "sha256:3dbc3130" + "1" * 56
NAR = "sha256-" + base64.b64encode(bytes(range(32))).decode()
SRC_SHA = "ab" * 32


def call(package: str, root: Path, extra: str = "") -> str:
    """A Nix expression calling pkgs/<package> with the stubs and the fleet at `root`."""
    return (
        f"let s = import {STUBS} {{ nixpkgsLib = {nix_str(nixpkgs_lib())}; }}; "
        f"fleet = (import {FLEET_LIB}).fromRoot {nix_str(root)}; "
        f"f = import {REPO / 'pkgs' / package}; "
        f"in (f (builtins.intersectAttrs (builtins.functionArgs f) (s // {{ inherit fleet; {extra} }})))"
    )


def resolved_fleet(dest: Path) -> Path:
    shutil.copytree(REPO / "hosts", dest / "hosts", ignore=shutil.ignore_patterns("dgx*"))
    shutil.copytree(REPO / "recipes", dest / "recipes", ignore=shutil.ignore_patterns("reports"))
    fleet = dest / "hosts" / "fleet.toml"
    text = fleet.read_text()
    text = re.sub(r'rev = "cad252b7d3"', f'rev = "{COMMIT}"\nnix_hash = "{NAR}"', text)
    text = re.sub(r'digest = "sha256:3dbc3130[0-9a-f]*"', f'digest = "{DIGEST}"\nnix_hash = "{NAR}"', text)
    text += (
        '\n[pins.mia-tp4-src-roce]\nkind = "url"\ncomponent = "roce"\n'
        f'url = "https://example.org/roce-1234.tar.gz"\nsha256 = "{SRC_SHA}"\nmanifest = "mia-tp4"\n'
    )
    fleet.write_text(text)
    return dest


def test_image_build_fails_on_partial_pins_naming_each_and_the_fix() -> None:
    image = nix_eval(call("mia-tp4-image.nix", REPO) + ".name")
    assert image == "mia-tp4-image-unresolved-pins"  # evaluates (flake check passes), fails when built
    script = nix_eval(call("mia-tp4-image.nix", REPO) + ".script")
    build = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert build.returncode == 1
    err = build.stderr
    # the base digest is resolved in fleet.toml, but its Nix hash is not computed yet
    assert "pin sglang-dsv41-base has no nix_hash" in err
    assert "pin mia-tp4 is unresolved (git MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks at 'cad252b7d3')" in err
    assert "run `sparkfleet pins resolve sglang-dsv41-base` where the network is" in err
    assert "sparkfleet pins import-manifest" in err  # no runtime sources imported yet


def test_required_pin_throws_with_the_fix() -> None:
    with pytest.raises(NixEvalError, match="pin mia-tp4 is unresolved"):
        nix_eval(f'((import {FLEET_LIB}).fromRoot {nix_str(REPO)}).requirePin "mia-tp4" "value"')


def test_image_from_resolved_pins(tmp_path: Path) -> None:
    root = resolved_fleet(tmp_path / "fleet")
    fields = "{ inherit (i) type kind args tests passthru; }"
    image = nix_eval(f"let i = {call('mia-tp4-image.nix', root)}; in {fields}")
    assert (image["type"], image["kind"]) == ("derivation", "streamLayeredImage")
    args = image["args"]
    pull = nix_eval(call("mia-tp4-image.nix", root) + ".args.fromImage.args")
    assert pull == {
        "imageName": "lmsysorg/sglang",
        "imageDigest": DIGEST,
        # lib.fetchers.withNormalizedHash (nixpkgs' lib) turned `hash` into outputHash
        "outputHash": NAR,
        "outputHashAlgo": None,
        "os": "linux",
        "arch": "arm64",
        "finalImageName": "lmsysorg/sglang",
        "finalImageTag": "dev-dsv41",
    }
    env = dict(item.split("=", 1) for item in args["config"]["Env"])
    # the two things the TP4 adapters read from env, not from flags: launcher gate and world shape
    assert env["DSV41_LAUNCHER"] == "tp4" and env["TP_SIZE"] == "4"
    assert env["EP_SIZE"] == "1" and env["DSV41_TP_PAD"] == "0"
    # the Dockerfile's ENV (passthru.tests checks these against the pinned Dockerfile at build)
    assert env["PYTHONPATH"] == "/opt/dsv41/adapter:/opt/b12x:/opt/b12x_next"
    assert env["OFFLOAD_MODE"] == "nvme" and env["DSV41_CACHE_GIB"] == "16" and env["STATE_PATH"] == "/state"
    assert env["MODEL_PATH"] == "/models/DeepSeek-V4.1-Flash"
    assert args["config"]["Entrypoint"] == ["/usr/bin/env"] and args["config"]["WorkingDir"] == "/opt/dsv41"
    assert args["config"]["Healthcheck"]["Test"] == ["CMD", "python3", "-S", "/opt/dsv41/boot.py", "health"]
    assert args["config"]["ExposedPorts"] == {"8888/tcp": {}}
    assert args["config"]["Labels"]["org.opencontainers.image.revision"] == COMMIT
    # tree and kernel layer copied in as files (whiteouts included), not store links
    store = "/nix/store/00000000000000000000000000000000"
    assert "contents" not in args
    copy = f"{store}-mia-tp4-tree-cad252b7d300/. {store}-mia-tp4-kernels-cad252b7d300/. ./"
    assert copy in args["extraCommands"]
    assert args["maxLayers"] == 100
    # the build's own checks, and the layers CI builds and caches
    # one build unpacks the base once: the kernel layer and the in-image checks are its two outputs
    assert image["tests"] == f"{store}-mia-tp4-kernels-cad252b7d300-tests"
    assert image["passthru"]["kernels"] == f"{store}-mia-tp4-kernels-cad252b7d300"


# runCommand as its script (every output of it too), so a test reads what a build would run
SCRIPT_AS_OUTPUT = (
    "runCommand = n: e: script: let d = { name = n; outPath = script; }; in "
    "d // builtins.listToAttrs (map (o: { name = o; value = d; }) (e.outputs or [ ])); "
)


def test_kernel_wheels_are_pinned_fetches_installed_like_pip(tmp_path: Path) -> None:
    extra = (
        SCRIPT_AS_OUTPUT +
        'fetchurl = a: { outPath = "<fetchurl:" + builtins.toJSON a + ">"; };'
    )
    image = call("mia-tp4-image.nix", resolved_fleet(tmp_path / "fleet"), extra=extra)
    kernels = nix_eval(f"({image}).kernels")
    pins = tomllib.loads((REPO / "hosts" / "fleet.toml").read_text())["pins"]
    compact = {"separators": (",", ":"), "sort_keys": True}
    for name in ("sglang-kernel-aarch64", "sgl-deep-gemm-aarch64"):
        pin = pins[name]
        assert pin["url"].startswith("https://files.pythonhosted.org/packages/")
        assert pin["url"].endswith("manylinux2014_aarch64.whl")
        assert re.fullmatch("[0-9a-f]{64}", pin["sha256"])
        fetch = {"sha256": pin["sha256"], "url": pin["url"]}
        assert f"<fetchurl:{json.dumps(fetch, **compact)}>" in kernels
    assert "image_tools.py install-wheels root $out" in kernels
    # row_store.cpp: the Dockerfile's own RUN line, run with the base image's g++ inside its rootfs
    assert "image_tools.py run " in kernels and "/Dockerfile.canary-roce row_store.cpp)" in kernels
    assert "image_tools.py in-image root" in kernels and "/opt/dsv41 \"$build\"" in kernels
    assert "librow_store.so $out/opt/dsv41/adapter/librow_store.so" in kernels
    tests = nix_eval(f"({image}).tests")
    assert "image_tools.py run-checks" in tests and "image_tools.py check-env" in tests
    # the in-image checks are the kernel build's second output: the base is unpacked once
    assert tests == kernels and kernels.count("image_tools.py unpack ") == 1


def test_a_missing_wheel_pin_stops_the_build_naming_it(tmp_path: Path) -> None:
    root = resolved_fleet(tmp_path / "fleet")
    fleet = root / "hosts" / "fleet.toml"
    text = fleet.read_text()
    start = text.index("[pins.sgl-deep-gemm-aarch64]")
    fleet.write_text(text[:start])  # the wheel pin is gone
    script = nix_eval(call("mia-tp4-image.nix", root) + ".script")
    build = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert build.returncode == 1
    assert "pin sgl-deep-gemm-aarch64 is not in hosts/fleet.toml" in build.stderr


def test_image_tree_runs_the_repos_fetch_stage_offline_from_pinned_downloads(tmp_path: Path) -> None:
    # writeText / runCommand / fetchers that keep their text and arguments inspectable
    extra = (
        "writeText = n: t: t; runCommand = n: e: script: { name = n; outPath = script; }; "
        'fetchFromGitHub = a: { outPath = "<github:" + builtins.toJSON a + ">"; }; '
        'fetchurl = a: { outPath = "<fetchurl:" + builtins.toJSON a + ">"; };'
    )
    image = call("mia-tp4-image.nix", resolved_fleet(tmp_path / "fleet"), extra=extra)
    tree = nix_eval(f"({image}).tree")
    compact = {"separators": (",", ":"), "sort_keys": True}
    github = {"hash": NAR, "owner": "MiaAI-Lab", "repo": "DeepSeek-v4.1-Flash-DGX-Sparks", "rev": COMMIT}
    assert f"<github:{json.dumps(github, **compact)}>" in tree
    # the fetch stage: the repo's own script, its curl served from fixed-output downloads by URL
    assert "bash repo/scripts/fetch_runtime.sh $out sglang-canary b12x b12x-next" in tree
    download = {"sha256": SRC_SHA, "url": "https://example.org/roce-1234.tar.gz"}
    assert f"https://example.org/roce-1234.tar.gz\t<fetchurl:{json.dumps(download, **compact)}>" in tree
    # the final stage: where the Dockerfile puts things, and the RoCEnante patch on the branch tree
    assert "/b12x/b12x " in tree and "/b12x/LICENSE $out/opt/b12x/" in tree
    assert "/b12x_next/b12x_next " in tree and "/b12x_next/LICENSE $out/opt/b12x_next/" in tree
    assert "patch -p1 -F3 <" in tree and "runtime/sglang-rocenante.patch" in tree
    # roce_tp4_adapt.py may name /sgl-workspace/... absolutely: our tree is bound there (proot)
    assert "proot -b $out/sgl-workspace:/sgl-workspace" in tree and "runtime/roce_tp4_adapt.py" in tree
    assert "touch $out/sgl-workspace/sglang/python/.wh..wh..opq" in tree


def requirement_key(requirement: str) -> str:
    """'name' for a ranged requirement, 'name==version' for an exact pin (normalised like Nix's pname)."""
    name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower().replace("-", "_")
    pinned = re.search(r"==\s*([^\s,;]+)", requirement)
    return f"{name}=={pinned.group(1)}" if pinned else name


def test_sparkfleet_package_has_the_pyproject_dependencies() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    deps = nix_eval(call("sparkfleet.nix", REPO, extra=f"src = {REPO};") + ".args.dependencies")
    # the runtime dependencies and the `gateway` extra (smg: `gateway run` imports it)
    gateway = project["optional-dependencies"]["gateway"]
    wanted = sorted(requirement_key(d) for d in project["dependencies"] + gateway)
    assert sorted(deps) == wanted, "pyproject.toml dependencies and pkgs/sparkfleet.nix disagree"
    meta = nix_eval(call("sparkfleet.nix", REPO, extra=f"src = {REPO};") + ".args.meta.mainProgram")
    assert meta == "sparkfleet"
    version = nix_eval(call("sparkfleet.nix", REPO, extra=f"src = {REPO};") + ".args.version")
    assert version == project["version"]


def test_profile_links_smg_and_nginx_only_where_the_gateway_runs(tmp_path: Path) -> None:
    """A host with services = ["gateway"] gets bin/smg and bin/nginx in its profile (its gateway unit's
    PATH starts at the profile's bin/); a host without, neither."""
    root = tmp_path / "fleet"
    shutil.copytree(REPO / "hosts", root / "hosts", ignore=shutil.ignore_patterns("dgx*"))
    shutil.copytree(REPO / "recipes", root / "recipes", ignore=shutil.ignore_patterns("reports"))
    fleet = root / "hosts" / "fleet.toml"
    fleet.write_text(fleet.read_text().replace("[hosts.dgx1]\n", '[hosts.dgx1]\nservices = ["gateway"]\n', 1))
    recipe = root / "recipes" / "dsv41-flash-4x-mia" / "recipe.toml"
    text = recipe.read_text()
    recipe.write_text(text.replace("[[models]]", "[gateway]\n\n[[models]]", 1))
    for host, gateway in (("dgx1", True), ("dgx2", False)):
        extra = f'host = "{host}"; fleetRoot = {nix_str(root)};'
        script = nix_eval(call("sparkfleet-profile.nix", root, extra=extra) + ".script")
        smg = "ln -s /nix/store/00000000000000000000000000000000-smg-1.13.0/bin/smg $out/bin/smg"
        nginx = "ln -s /nix/store/00000000000000000000000000000000-nginx-1.26.3/bin/nginx $out/bin/nginx"
        assert (smg in script, nginx in script) == (gateway, gateway), script


def test_profile_ships_units_activation_and_cli() -> None:
    script = nix_eval(
        call("sparkfleet-profile.nix", REPO, extra=f'host = "dgx1"; fleetRoot = "{REPO}";') + ".script"
    )
    for unit in (
        "sparkfleet-stage.service",
        "sparkfleet-stage.timer",
        "sparkfleet-lane-dsv41-flash-4x-mia.service",
        "sparkfleet-lane-dsv41-flash-exl3-2x.service",
    ):
        assert f"$out/share/sparkfleet/units/{unit}" in script
    assert "$out/bin/sparkfleet-activate" in script and "activate.sh" in script
    assert (
        "ln -s /nix/store/00000000000000000000000000000000-sparkfleet/bin/sparkfleet $out/bin/sparkfleet"
        in script
    )


def test_fetch_stage_script_runs_offline_with_the_pinned_downloads(tmp_path: Path) -> None:
    """The runtime derivation's build script, run by bash: the repo's fetch script (here a small one
    calling curl exactly as scripts/fetch_runtime.sh does) gets the pinned file, and an unpinned
    URL fails naming the fix."""
    root = resolved_fleet(tmp_path / "fleet")
    download = tmp_path / "roce-1234.tar.gz"
    download.write_bytes(b"pinned bytes\n")
    repo = tmp_path / "repo-src"
    (repo / "scripts").mkdir(parents=True)
    (repo / "scripts" / "fetch_runtime.sh").write_text(
        "set -euo pipefail\nOUT=$1\nmkdir -p $OUT\n"
        'curl -fsSL --retry 3 --retry-delay 5 -m 900 -o "$OUT/roce.tgz" "https://example.org/roce-1234.tar.gz"\n'
        'curl -fsSL --retry 3 --retry-delay 5 -m 900 -o "$OUT/x" "${EXTRA_URL:-https://example.org/roce-1234.tar.gz}"\n'
        # the call again with flags scripts/fetch_runtime.sh does not use (unquoted: word-split)
        'curl ${EXTRA_FLAGS:-} -fsSL -o "$OUT/y" "https://example.org/roce-1234.tar.gz"\n'
    )
    tsv = tmp_path / "downloads.tsv"
    fetchers = (
        f'fetchurl = a: {{ outPath = "{download}"; }}; fetchFromGitHub = a: {{ outPath = "{repo}"; }}; '
        "runCommand = n: e: script: { name = n; outPath = script; };"
    )
    text = nix_eval(
        f"let x = ({call('mia-tp4-image.nix', root, extra=fetchers + ' writeText = n: t: t;')}); "
        "in x.tree"
    )
    assert f"https://example.org/roce-1234.tar.gz\t{download}\n" in text
    tsv.write_text(f"https://example.org/roce-1234.tar.gz\t{download}\n")
    image = call("mia-tp4-image.nix", root, extra=fetchers + f' writeText = n: t: "{tsv}";')
    # the runtime derivation's script is interpolated (as its "outPath") into the tree's script
    tree = nix_eval(f"({image}).tree")
    begin = tree.index("mkdir -p bin")
    fetch = "bash repo/scripts/fetch_runtime.sh $out sglang-canary b12x b12x-next\n"
    script = "patchShebangs() { :; }\n" + tree[begin : tree.index(fetch, begin) + len(fetch)]
    work = tmp_path / "build"
    work.mkdir()
    ok = subprocess.run(
        ["bash", "-c", script],
        cwd=work,
        env={"out": str(tmp_path / "out"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "out" / "roce.tgz").read_bytes() == b"pinned bytes\n"
    shutil.rmtree(work)
    work.mkdir()
    bad = subprocess.run(
        ["bash", "-c", script],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
        env={
            "out": str(tmp_path / "out2"),
            "PATH": "/usr/bin:/bin",
            "EXTRA_URL": "https://example.org/other.tgz",
        },
    )
    assert bad.returncode != 0
    assert "https://example.org/other.tgz is not a url pin in hosts/fleet.toml" in bad.stderr
    # a flag the stand-in does not know stops the build, naming it, instead of being misread
    # (before: `-H X-Token:abc` skipped -H and took X-Token:abc for the URL)
    for flags, message in (
        ("-H X-Token:abc", "unknown flag -H"),
        ("--compressed", "unknown flag --compressed"),
        ("-fsSLk", "unknown flag -fsSLk"),
        ("https://example.org/second", "a second URL https://example.org/roce-1234.tar.gz"),
    ):
        shutil.rmtree(work)
        work.mkdir()
        env = {"out": str(tmp_path / "out3"), "PATH": "/usr/bin:/bin", "EXTRA_FLAGS": flags}
        run = subprocess.run(["bash", "-c", script], cwd=work, capture_output=True, text=True, env=env)
        assert run.returncode == 2, (flags, run.stderr)
        assert message in run.stderr, (flags, run.stderr)


BUSYBOX = Path("/bin/busybox")


@pytest.mark.skipif(
    shutil.which("proot") is None or not BUSYBOX.is_file(),
    reason="proot and busybox-static not installed (make test installs them)",
)
def test_kernel_layer_and_image_tests_derivations_run_end_to_end(tmp_path: Path) -> None:
    """The `kernels` and `tests` derivations' own scripts, run by bash: a base image made here
    (static busybox, a site-packages with the old kernel), wheels with the pinned file names, and a
    pinned repo whose Dockerfile builds librow_store.so and runs a test inside the image."""
    from .test_image_tools import _layer, docker_archive, wheel

    pytest.importorskip("installer", reason="pypa installer not installed (make venv installs it)")
    if not store_writable():
        pytest.skip("/nix/store is not writable (the scripts name real store files)")
    site = "usr/lib/python3/dist-packages"
    link = {"type": tarfile.SYMTYPE, "linkname": "/bin/busybox"}
    rootfs = [("bin", None), ("bin/busybox", BUSYBOX.read_bytes(), {"mode": 0o755})]
    rootfs += [(f"bin/{t}", b"", link) for t in ("sh", "cp", "test", "cat")]
    rootfs += [("usr", None), ("usr/bin", None), ("usr/bin/env", b"", link), ("usr/lib", None)]
    rootfs += [("usr/lib/python3", None), (site, None), (f"{site}/torch", None)]
    rootfs += [(f"{site}/torch/__init__.py", b"")]  # the base's python, as site_packages() finds it
    base = docker_archive(tmp_path / "base.tar", [_layer(rootfs)], env=["PATH=/bin:/usr/bin", "FROM_BASE=1"])

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    pins = tomllib.loads((REPO / "hosts" / "fleet.toml").read_text())["pins"]
    for name, module in (("sglang-kernel-aarch64", "sgl_kernel"), ("sgl-deep-gemm-aarch64", "deep_gemm")):
        filename = pins[name]["url"].rsplit("/", 1)[1]
        dist, version = filename.split("-")[:2]
        wheel(wheels / filename, dist, version, {f"{module}/__init__.py": b"# pinned\n"})

    repo = tmp_path / "repo"
    (repo / "adapter").mkdir(parents=True)
    (repo / "adapter" / "row_store.cpp").write_text("// row store\n")
    (repo / "Dockerfile.canary-roce").write_text(
        "FROM base\nWORKDIR /opt/dsv41\n"
        "RUN cp adapter/row_store.cpp adapter/librow_store.so\n"
        "RUN sh /opt/dsv41/tests/test_in_image.sh\n"
        "ENV PYTHONPATH=/opt/dsv41/adapter:/opt/b12x:/opt/b12x_next MODEL_PATH=/models/DeepSeek-V4.1-Flash "
        "STATE_PATH=/state OFFLOAD_MODE=nvme DSV41_CACHE_GIB=16\n"
    )
    outs = tmp_path / "outs"
    outs.mkdir()
    extra = (
        f'runCommand = n: e: script: let d = {{ name = n; outPath = "{outs}/" + n; inherit script; }}; in '
        "d // builtins.listToAttrs (map (o: { name = o; value = d // { outPath = d.outPath + \"-\" + o; }; })"
        " (e.outputs or [ ])); "
        f'fetchurl = a: {{ outPath = "{wheels}/" + baseNameOf a.url; }}; '
        f'fetchFromGitHub = a: {{ outPath = "{repo}"; }}; '
        f'dockerTools = s.dockerTools // {{ pullImage = a: {{ outPath = "{base}"; }}; }};'
    )
    image = call("mia-tp4-image.nix", resolved_fleet(tmp_path / "fleet"), extra=extra)
    # one derivation, one unpack of the base: the layer ($out) and the in-image checks ($tests)
    kernels = nix_eval(
        f"let d = ({image}).kernels; in {{ inherit (d) script; out = d.outPath; tests = d.tests.outPath; }}",
        write_store=True,
    )
    assert nix_eval(f"({image}).tests.outPath") == kernels["tests"]
    assert kernels["script"].count(" unpack ") == 1

    # python3 with pypa's installer (the derivation's python3.withPackages), proot, coreutils
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"

    # the tree (built elsewhere from the fetch stage): here, the test the Dockerfile runs
    tree = Path(kernels["out"].replace("mia-tp4-kernels", "mia-tp4-tree"))
    (tree / "opt/dsv41/tests").mkdir(parents=True)
    (tree / "opt/dsv41/tests/test_in_image.sh").write_text(
        'test "$FROM_BASE" = 1 && test "$(pwd)" = /opt/dsv41 && test -f adapter/librow_store.so '
        f"&& test -f /{site}/sgl_kernel/__init__.py\n"
    )
    (tmp_path / "build").mkdir()
    env = {"out": kernels["out"], "tests": kernels["tests"], "PATH": path, "TMPDIR": str(tmp_path)}
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", kernels["script"]], cwd=tmp_path / "build", capture_output=True,
        text=True, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    layer = Path(kernels["out"])
    assert (layer / site / "sgl_kernel" / "__init__.py").read_text() == "# pinned\n"
    assert (layer / site / "deep_gemm" / "__init__.py").exists()
    assert (layer / "opt/dsv41/adapter/librow_store.so").read_text() == "// row store\n"  # built in the image
    assert Path(kernels["tests"]).read_text() == "1 in-image test files passed\n"


@pytest.mark.skipif(
    shutil.which("proot") is None or shutil.which("patch") is None, reason="proot or patch not installed"
)
def test_tree_derivation_runs_the_adapter_with_absolute_sgl_workspace_paths(tmp_path: Path) -> None:
    """The `tree` derivation's script, run by bash, on a repo made here whose roce_tp4_adapt.py
    writes to /sgl-workspace/... absolutely (what the Dockerfile's in-image run allows): proot binds
    our tree there, so both its absolute and relative edits land in $out. The RoCEnante patch is
    applied, only the b12x packages and LICENSEs are copied, and python/ carries the opaque whiteout."""
    repo = tmp_path / "repo"
    for d in ("adapter", "scripts", "tests", "benchmarks", "runtime"):
        (repo / d).mkdir(parents=True)
        (repo / d / "keep.txt").write_text(d)
    (repo / "boot.py").write_text("# boot\n")
    (repo / "runtime" / "flash_mla_sm120.canary.py").write_text("# sm120 override\n")
    (repo / "runtime" / "sglang-rocenante.patch").write_text(
        "--- a/python/sglang/a.py\n+++ b/python/sglang/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2  # RoCEnante\n"
    )
    (repo / "runtime" / "roce_tp4_adapt.py").write_text(
        "from pathlib import Path\n"
        "Path('/sgl-workspace/sglang/python/sglang/tp4_abs.txt').write_text('absolute')\n"
        "Path('python/sglang/tp4_rel.txt').write_text('relative')\n"
    )
    outs = tmp_path / "outs"
    runtime = outs / "mia-tp4-runtime-cad252b7d300"
    for pkg in ("b12x", "b12x_next"):
        (runtime / pkg / pkg).mkdir(parents=True)
        (runtime / pkg / pkg / "__init__.py").write_text("")
        (runtime / pkg / "LICENSE").write_text("license")
        (runtime / pkg / "setup.py").write_text("not copied")
    attention = runtime / "sglang-canary" / "python" / "sglang" / "kernels" / "ops" / "attention"
    attention.mkdir(parents=True)
    (attention / "flash_mla_sm120.py").write_text("# branch version\n")
    (runtime / "sglang-canary" / "python" / "sglang" / "a.py").write_text("x = 1\n")

    extra = (
        f'runCommand = n: e: script: {{ name = n; outPath = "{outs}/" + n; inherit script; }}; '
        f'fetchFromGitHub = a: {{ outPath = "{repo}"; }};'
    )
    image = call("mia-tp4-image.nix", resolved_fleet(tmp_path / "fleet"), extra=extra)
    tree = nix_eval(f"let d = ({image}).tree; in {{ inherit (d) script; out = d.outPath; }}")
    out = Path(tree["out"])
    work = tmp_path / "build"
    work.mkdir()
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", tree["script"]], cwd=work, capture_output=True, text=True,
        env={"out": str(out), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
             "TMPDIR": str(tmp_path)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    py = out / "sgl-workspace" / "sglang" / "python"
    assert (py / "sglang" / "tp4_abs.txt").read_text() == "absolute"  # /sgl-workspace/... -> $out
    assert (py / "sglang" / "tp4_rel.txt").read_text() == "relative"
    assert (py / "sglang" / "a.py").read_text() == "x = 2  # RoCEnante\n"
    assert (py / ".wh..wh..opq").exists()
    assert (py / "sglang/kernels/ops/attention/flash_mla_sm120.py").read_text() == "# sm120 override\n"
    assert sorted(p.name for p in (out / "opt" / "b12x").iterdir()) == ["LICENSE", "b12x"]
    assert sorted(p.name for p in (out / "opt" / "dsv41").iterdir()) == [
        "adapter", "benchmarks", "boot.py", "scripts", "tests"
    ]  # fmt: skip
    assert not Path("/sgl-workspace").exists()  # nothing written outside the build


STAND_INS = f"(import {STUBS} {{ nixpkgsLib = {nix_str(nixpkgs_lib() or '/nonexistent')}; }})"


@pytest.mark.parametrize(
    ("call_expr", "message"),
    [
        # an argument the real dockerTools.pullImage does not declare
        ('dockerTools.pullImage { imageName = "a"; imageDigest = "sha256:0"; hash = ""; digest = "x"; }',
         "unexpected argument 'digest'"),
        # neither hash, sha256 nor outputHash: lib.fetchers.withNormalizedHash's own error
        ('dockerTools.pullImage { imageName = "a"; imageDigest = "sha256:0"; }', "hash"),
        ('(dockerTools.streamLayeredImage { name = "i"; fromImage = null; enableFakeroot = true; }).name',
         "unexpected argument 'enableFakeroot'"),
        ('(dockerTools.streamLayeredImage { tag = "t"; }).name', "without required argument 'name'"),
        ('(writeShellApplication { name = "a"; text = ""; runtimeDeps = [ ]; }).name',
         "unexpected argument 'runtimeDeps'"),
        ('(writeText "a" { }).name', "text must be a string"),
    ],
)
def test_stand_ins_reject_what_the_real_builders_reject(call_expr: str, message: str) -> None:
    with pytest.raises(NixEvalError, match=message):
        nix_eval(f"with {STAND_INS}; {call_expr}")


def test_stand_ins_are_derivations_that_keep_text_and_context() -> None:
    expr = (
        f"with {STAND_INS}; let dep = builtins.toFile \"dep\" \"x\"; "
        "t = writeText \"unit\" \"ExecStart=${dep}/bin/x\"; in "
        "{ inherit (t) type text; ctx = builtins.attrNames (builtins.getContext t.outPath); "
        "img = (dockerTools.streamLayeredImage { name = \"a/b\"; tag = \"t\"; }).override { tag = \"u\"; }; }"
    )
    got = nix_eval(f"let r = {expr}; in r // {{ img = {{ inherit (r.img) type imageName imageTag; }}; }}")
    dep = got["ctx"][0]
    assert got["type"] == "derivation"
    assert got["text"] == f"ExecStart={dep}/bin/x"  # the text, not just a name
    assert dep.startswith("/nix/store/") and dep.endswith("-dep")  # the dependency stays in its closure
    # streamLayeredImage is makeOverridable (nixpkgs lib's), as the real one is
    assert got["img"] == {"type": "derivation", "imageName": "a/b", "imageTag": "u"}
