"""pkgs/mia-tp4-image/image_tools.py: the Dockerfile steps the Nix image build does on files.

Real formats, made here: a docker-archive with two layers (whiteouts, an opaque directory,
symlinks, hard links) as skopeo/dockerTools.pullImage write it, real wheels (zip + dist-info,
installed by pypa's installer as pip does), and a two-stage Dockerfile with continuation lines.
The pinned repo's own Dockerfile is read by the build, never stored here.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import io
import json
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

from .conftest import REPO

TOOLS = REPO / "pkgs" / "mia-tp4-image" / "image_tools.py"
spec = importlib.util.spec_from_file_location("image_tools", TOOLS)
tools = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tools)

SITE = "usr/local/lib/python3.12/dist-packages"


def _add(tar: tarfile.TarFile, name: str, data: bytes | None = None, **kw) -> None:
    info = tarfile.TarInfo(name)
    for k, v in kw.items():
        setattr(info, k, v)
    if data is None and info.type == tarfile.REGTYPE and not kw:
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
    if data is not None:
        info.size = len(data)
        info.mode = kw.get("mode", 0o644)
    tar.addfile(info, io.BytesIO(data) if data is not None else None)


def _layer(entries: list[tuple]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for entry in entries:
            _add(tar, *entry[:2], **(entry[2] if len(entry) > 2 else {}))
    return buf.getvalue()


def docker_archive(path: Path, layers: list[bytes], env: list[str] | None = None) -> Path:
    names = [f"{hashlib.sha256(layer).hexdigest()}/layer.tar" for layer in layers]
    with tarfile.open(path, "w") as tar:
        for name, layer in zip(names, layers, strict=True):
            _add(tar, name, layer)
        manifest = [{"Config": "c.json", "RepoTags": [], "Layers": names}]
        _add(tar, "manifest.json", json.dumps(manifest).encode())
        _add(tar, "c.json", json.dumps({"architecture": "arm64", "config": {"Env": env or []}}).encode())
    return path


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def wheel(path: Path, dist: str, version: str, files: dict[str, bytes]) -> Path:
    info = f"{dist}-{version}.dist-info"
    files = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: false\nTag: cp310-abi3-any\n",
    }
    record = "\n".join([*(record_line(n, d) for n, d in files.items()), f"{info}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(f"{info}/RECORD", record)
    return path


@pytest.fixture
def base_image(tmp_path: Path) -> Path:
    old_record = "\n".join(
        [
            "sgl_kernel/__init__.py,,",
            "sgl_kernel/old_ops.so,,",
            "sglang_kernel-0.4.6.dist-info/METADATA,,",
            "sglang_kernel-0.4.6.dist-info/RECORD,,",
        ]
    )
    lower = _layer(
        [
            ("etc", None),
            ("etc/motd", b"base\n"),
            ("sgl-workspace/sglang/python/sglang", None),
            ("sgl-workspace/sglang/python/sglang/old.py", b"old tree\n"),
            (f"{SITE}/sgl_kernel", None),
            (f"{SITE}/sgl_kernel/__init__.py", b"VERSION = '0.4.6'\n"),
            (f"{SITE}/sgl_kernel/old_ops.so", b"\x7fELF old"),
            (f"{SITE}/sglang_kernel-0.4.6.dist-info", None),
            (f"{SITE}/sglang_kernel-0.4.6.dist-info/METADATA", b"Name: sglang-kernel\nVersion: 0.4.6\n"),
            (f"{SITE}/sglang_kernel-0.4.6.dist-info/RECORD", old_record.encode()),
            (f"{SITE}/torch", None),
            (f"{SITE}/torch/__init__.py", b""),
            ("usr/bin/python3", b"#!/bin/false\n", {"mode": 0o755}),
            ("usr/bin/python", b"", {"type": tarfile.SYMTYPE, "linkname": "python3"}),
            ("dev/null", b"", {"type": tarfile.CHRTYPE}),
        ]
    )
    upper = _layer(
        [
            ("etc/.wh.motd", b""),
            ("sgl-workspace/sglang/python/.wh..wh..opq", b""),
            ("sgl-workspace/sglang/python/sglang", None),
            ("sgl-workspace/sglang/python/sglang/new.py", b"canary tree\n"),
            ("usr/bin/python3.12", b"", {"type": tarfile.LNKTYPE, "linkname": "usr/bin/python3"}),
        ]
    )
    return docker_archive(tmp_path / "base.tar", [lower, upper])


def test_unpack_applies_layers_whiteouts_and_links(base_image: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    assert len(tools.unpack(base_image, root)) == 2
    assert not (root / "etc" / "motd").exists()
    assert sorted(p.name for p in (root / "sgl-workspace/sglang/python/sglang").iterdir()) == ["new.py"]
    assert (root / "usr/bin/python").is_symlink() and (root / "usr/bin/python").readlink() == Path("python3")
    assert (root / "usr/bin/python3.12").stat().st_ino == (root / "usr/bin/python3").stat().st_ino
    assert not (root / "dev" / "null").exists()  # no device nodes in a build sandbox
    assert tools.site_packages(root) == Path("/") / SITE


def test_site_packages_refuses_a_base_without_python(tmp_path: Path) -> None:
    (tmp_path / "root" / "usr").mkdir(parents=True)
    with pytest.raises(SystemExit, match="no python site-packages"):
        tools.site_packages(tmp_path / "root")


def test_install_wheels_replaces_the_installed_version_as_pip_does(base_image: Path, tmp_path: Path) -> None:
    pytest.importorskip("installer", reason="pypa installer not installed (make venv installs it)")
    root = tmp_path / "root"
    tools.unpack(base_image, root)
    whl = wheel(
        tmp_path / "sglang_kernel-0.4.7-cp310-abi3-manylinux2014_aarch64.whl",
        "sglang_kernel",
        "0.4.7",
        {"sgl_kernel/__init__.py": b"VERSION = '0.4.7'\n", "sgl_kernel/new_ops.so": b"\x7fELF new"},
    )
    gemm = wheel(
        tmp_path / "sgl_deep_gemm-0.2.0-py3-none-manylinux2014_aarch64.whl",
        "sgl_deep_gemm",
        "0.2.0",
        {"deep_gemm/__init__.py": b""},
    )
    layer = tmp_path / "layer"
    assert tools.install_wheels(root, layer, [whl, gemm]) == [whl.name, gemm.name]
    site = layer / SITE
    assert (site / "sgl_kernel" / "__init__.py").read_text() == "VERSION = '0.4.7'\n"
    assert (site / "sgl_kernel" / ".wh.old_ops.so").exists()  # in the old RECORD, not in the new wheel
    assert not (site / "sgl_kernel" / ".wh.__init__.py").exists()  # replaced, not hidden
    assert (site / ".wh.sglang_kernel-0.4.6.dist-info").exists()
    assert (site / "sglang_kernel-0.4.7.dist-info" / "INSTALLER").read_text() == "pip\n"
    assert (site / "deep_gemm" / "__init__.py").exists()

    # the layer on top of the base: what `docker load` shows is what pip would have left
    archive = tmp_path / "layered.tar"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(layer, arcname=".")
    lower = _layer([])
    docker_archive(archive, [lower, buf.getvalue()])
    tools.unpack(archive, root)
    assert sorted(p.name for p in (root / SITE / "sgl_kernel").iterdir()) == ["__init__.py", "new_ops.so"]
    assert sorted(p.name for p in (root / SITE).glob("sglang_kernel-*.dist-info")) == [
        "sglang_kernel-0.4.7.dist-info"
    ]


DOCKERFILE = """\
# a two-stage build like the pinned one (this text is ours)
FROM example/base@sha256:aaaa AS fetch
RUN python3 -c "import fetch_only"

FROM example/base@sha256:aaaa
RUN pip install --no-deps "a==1"
RUN python3 -c "import sglang, sglang.srt; print('import ok')"
RUN PYTHONPATH=/opt/x python3 -c "from b12x.comm import roce; print(roce.API_VERSION)"
WORKDIR /opt/dsv41
RUN PYTHONPATH=/opt/dsv41/adapter python3 /opt/dsv41/tests/test_one.py \\
 && CUDA_VISIBLE_DEVICES= PYTHONPATH=/opt/dsv41/adapter python3 /opt/dsv41/tests/test_two.py \\
 && cd /opt/dsv41/tests && python3 test_three.py /sgl-workspace/x.py
ENV PYTHONPATH=/opt/dsv41/adapter:/opt/b12x \\
    MODEL_PATH=/models/M \\
    STATE_PATH=/state OFFLOAD_MODE=nvme DSV41_CACHE_GIB=16
ENV LEGACY value with space
ENTRYPOINT ["python3", "-u", "/opt/dsv41/boot.py"]
"""


def test_checks_and_env_come_from_the_final_stage(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(DOCKERFILE)
    checks = tools.checks(dockerfile)
    assert len(checks) == 3 and not any("fetch_only" in c for c in checks)
    assert checks[0] == "python3 -c \"import sglang, sglang.srt; print('import ok')\""
    assert tools.count_tests(checks) == 3
    assert tools.env(dockerfile) == {
        "PYTHONPATH": "/opt/dsv41/adapter:/opt/b12x",
        "MODEL_PATH": "/models/M",
        "STATE_PATH": "/state",
        "OFFLOAD_MODE": "nvme",
        "DSV41_CACHE_GIB": "16",
        "LEGACY": "value with space",
    }
    dockerfile.write_text("FROM x\nRUN make\n")
    with pytest.raises(SystemExit, match="no import checks or tests"):
        tools.checks(dockerfile)


def test_one_run_step_and_env_parity(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(DOCKERFILE)
    assert tools.run(dockerfile, "pip install") == 'pip install --no-deps "a==1"'
    with pytest.raises(SystemExit, match="2 RUN steps"):
        tools.run(dockerfile, "python3 -c")
    ours = tools.env(dockerfile)
    tools.check_env(dockerfile, {**ours, "TP_SIZE": "4"})  # more is fine
    with pytest.raises(SystemExit, match="DSV41_CACHE_GIB: Dockerfile '16', image '8'"):
        tools.check_env(dockerfile, {**ours, "DSV41_CACHE_GIB": "8"})


def test_overlay_applies_a_layer_directory(base_image: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    tools.unpack(base_image, root)
    layer = tmp_path / "layer"
    (layer / "sgl-workspace/sglang/python/sglang").mkdir(parents=True)
    (layer / "sgl-workspace/sglang/python/.wh..wh..opq").touch()
    (layer / "sgl-workspace/sglang/python/sglang/ours.py").write_text("ours\n")
    (layer / SITE / "sgl_kernel").mkdir(parents=True)
    (layer / SITE / "sgl_kernel" / ".wh.old_ops.so").touch()
    tools.overlay(layer, root)
    assert [p.name for p in (root / "sgl-workspace/sglang/python/sglang").iterdir()] == ["ours.py"]
    assert sorted(p.name for p in (root / SITE / "sgl_kernel").iterdir()) == ["__init__.py"]


BUSYBOX = Path("/bin/busybox")


@pytest.mark.skipif(
    shutil.which("proot") is None or not BUSYBOX.is_file(),
    reason="proot and busybox-static not installed (make test installs them)",
)
def test_in_image_checks_run_inside_the_image_with_its_env(tmp_path: Path) -> None:
    """The in-image tests for real: a base image of a static busybox, its Env in the config; the
    Dockerfile's test steps run inside it by proot with exactly the image's Env plus ours (none of
    the build sandbox's variables), in WORKDIR /opt/dsv41; a failing test stops the build."""
    rootfs = [("bin", None), ("bin/busybox", BUSYBOX.read_bytes(), {"mode": 0o755})]
    link = {"type": tarfile.SYMTYPE, "linkname": "/bin/busybox"}
    rootfs += [(f"bin/{tool}", b"", link) for tool in ("sh", "test", "cat")]
    rootfs += [("usr", None), ("usr/bin", None), ("usr/bin/env", b"", link), ("tmp", None)]
    base_env = ["PATH=/bin", "BASE_ONLY=from-base"]
    archive = docker_archive(tmp_path / "base.tar", [_layer(rootfs)], env=base_env)
    assert tools.image_env(archive) == {"PATH": "/bin", "BASE_ONLY": "from-base"}
    root = tmp_path / "root"
    tools.unpack(archive, root)
    tree = tmp_path / "tree"
    (tree / "opt" / "dsv41" / "tests").mkdir(parents=True)
    (tree / "opt" / "dsv41" / "tests" / "test_env.sh").write_text(
        'test "$BASE_ONLY" = from-base && test "$OFFLOAD_MODE" = nvme && test "$(pwd)" = /opt/dsv41 '
        '&& test -z "$NIX_STORE" && test -f adapter/librow_store.so\n'
    )
    (tree / "opt" / "dsv41" / "adapter").mkdir()
    (tree / "opt" / "dsv41" / "adapter" / "librow_store.so").write_bytes(b"\x7fELF")
    tools.overlay(tree, root)
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM base\nWORKDIR /opt/dsv41\nRUN sh /opt/dsv41/tests/test_env.sh\n")
    env = {"OFFLOAD_MODE": "nvme"}
    assert tools.run_checks(dockerfile, root, archive, env) == 1
    (root / "opt" / "dsv41" / "adapter" / "librow_store.so").unlink()
    with pytest.raises(SystemExit, match="image check failed"):
        tools.run_checks(dockerfile, root, archive, env)
    # in-image: the Dockerfile's build step (here a file it writes) lands in the image's tree
    step = 'cat tests/test_env.sh > adapter/built && test -n "$BASE_ONLY"'
    tools.in_image(root, archive, "/opt/dsv41", step)
    assert (root / "opt" / "dsv41" / "adapter" / "built").read_text().startswith("test ")


def test_wheel_pins_name_the_versions_the_dockerfile_installs() -> None:
    """The two kernel wheels are url pins whose file is the aarch64 wheel of exactly the version
    their `component` names (sglang-kernel==0.4.7, sgl-deep-gemm==0.2.0) with a full sha256."""
    import re
    import tomllib

    pins = tomllib.loads((REPO / "hosts" / "fleet.toml").read_text())["pins"]
    seen = {}
    for name in ("sglang-kernel-aarch64", "sgl-deep-gemm-aarch64"):
        pin = pins[name]
        dist, version = pin["component"].split("==")
        wheel_name = pin["url"].rsplit("/", 1)[1]
        file_dist, file_version, *_tags, platform = wheel_name.removesuffix(".whl").split("-")
        assert file_dist == dist.replace("-", "_") and file_version == version
        assert platform == "manylinux2014_aarch64"
        assert re.fullmatch("[0-9a-f]{64}", pin["sha256"])
        seen[dist] = version
    assert seen == {"sglang-kernel": "0.4.7", "sgl-deep-gemm": "0.2.0"}
