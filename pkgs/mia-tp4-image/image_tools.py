"""Build-time helpers of pkgs/mia-tp4-image.nix: the steps of the pinned Dockerfile.canary-roce
that a Nix build cannot do with `docker build`, done on files instead.

  unpack ARCHIVE DEST           a docker-archive (dockerTools.pullImage) as a root filesystem,
                                layer by layer, honouring whiteouts
  site-packages ROOT            the base image's site-packages directory (where pip installs)
  install-wheels ROOT OUT WHL…  `pip install --no-deps WHL…` as a layer: the wheels installed
                                under OUT at ROOT's site-packages, the version they replace
                                whited out (files of its RECORD and its .dist-info)
  overlay LAYER ROOT            a layer directory (files + whiteouts) applied onto ROOT
  run DOCKERFILE TEXT           the one RUN command of the final stage that mentions TEXT
  checks DOCKERFILE             the Dockerfile's build-time checks (its RUN python3 import checks
                                and in-image tests), one JSON list of shell commands
  run-checks DOCKERFILE ROOT ARCHIVE
                                run those checks inside ROOT (proot, WORKDIR /opt/dsv41) with the
                                base image's Env (from ARCHIVE), as the Dockerfile's RUNs see it
                                (its ENV comes after them); prints how many test files ran
  in-image ROOT ARCHIVE WORKDIR CMD
                                run CMD (sh -c) inside ROOT with the base image's Env
  env DOCKERFILE                the Dockerfile's final ENV, as JSON
  check-env DOCKERFILE JSON     fail unless the image's Env (JSON object) carries every ENV of
                                the Dockerfile with the same value

Stdlib only, plus pypa's `installer` for install-wheels (what pip itself uses to lay out a wheel).
Why not parse less: the build then runs exactly what the pinned Dockerfile runs, and fails when
it changes, instead of a list restated here drifting from it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"


def _safe(member: str) -> PurePosixPath:
    path = PurePosixPath(member.lstrip("./") if member.startswith("./") else member.lstrip("/"))
    if any(part == ".." for part in path.parts):
        raise SystemExit(f"unpack: layer member escapes the root: {member}")
    return path


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def unpack(archive: Path, dest: Path) -> list[str]:
    """Apply the image's layers in order onto dest; return the layer names applied."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))
        if len(manifest) != 1:
            raise SystemExit(f"unpack: {archive} holds {len(manifest)} images, expected one")
        layers = manifest[0]["Layers"]
        for layer in layers:
            with tarfile.open(fileobj=outer.extractfile(layer)) as tar:
                _apply_layer(tar, dest)
    return layers


def _apply_layer(tar: tarfile.TarFile, dest: Path) -> None:
    members = tar.getmembers()
    # whiteouts first: they refer to lower layers only
    for m in members:
        rel = _safe(m.name)
        if rel.name == OPAQUE:
            parent = dest / rel.parent
            if parent.is_dir():
                for child in parent.iterdir():
                    _remove(child)
        elif rel.name.startswith(WHITEOUT):
            _remove(dest / rel.parent / rel.name[len(WHITEOUT) :])
    for m in members:
        rel = _safe(m.name)
        if rel.name.startswith(WHITEOUT) or str(rel) in ("", "."):
            continue
        target = dest / rel
        if m.isdir():
            if target.is_symlink() or (target.exists() and not target.is_dir()):
                _remove(target)
            target.mkdir(parents=True, exist_ok=True)
            target.chmod(0o755 | (m.mode & 0o777))
            continue
        if m.ischr() or m.isblk() or m.isfifo():
            continue  # device nodes cannot be made in a build sandbox; a container gets its own /dev
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.exists():
            _remove(target)
        if m.issym():
            os.symlink(m.linkname, target)
        elif m.islnk():
            os.link(dest / _safe(m.linkname), target)
        else:
            with tar.extractfile(m) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
            target.chmod((m.mode & 0o777) | 0o200)


def overlay(layer: Path, root: Path) -> None:
    """Apply a layer laid out as a directory (what extraCommands copies into the image)."""
    for dirpath, dirnames, filenames in os.walk(layer):
        rel = Path(dirpath).relative_to(layer)
        names = set(filenames)
        if OPAQUE in names and (root / rel).is_dir():
            for child in (root / rel).iterdir():
                _remove(child)
        for name in sorted(names):
            if name.startswith(WHITEOUT):
                if name != OPAQUE:
                    _remove(root / rel / name[len(WHITEOUT) :])
                continue
            target = root / rel / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink() or target.exists():
                _remove(target)
            src = Path(dirpath) / name
            if src.is_symlink():
                os.symlink(os.readlink(src), target)
            else:
                shutil.copyfile(src, target)
                target.chmod(src.stat().st_mode & 0o777 | 0o200)
        for name in dirnames:
            d = root / rel / name
            if d.is_symlink() or (d.exists() and not d.is_dir()):
                _remove(d)
            d.mkdir(parents=True, exist_ok=True)


def site_packages(root: Path) -> PurePosixPath:
    """The directory the base image's pip installs into, as an absolute path inside the image.

    The one holding the installed sglang kernel package (what the Dockerfile's pip replaces),
    else the one holding torch; never a guess: no such directory stops the build.
    """
    candidates = sorted(
        p
        for pattern in (
            "usr/local/lib/python3*/*-packages",
            "usr/lib/python3*/*-packages",
            "opt/*/lib/python3*/*-packages",
        )
        for p in root.glob(pattern)
        if p.is_dir()
    )
    for marker in ("sgl_kernel", "sglang_kernel-*.dist-info", "torch"):
        hits = [c for c in candidates if any(c.glob(marker))]
        if hits:
            return PurePosixPath("/") / hits[0].relative_to(root)
    raise SystemExit(
        f"site-packages: no python site-packages with sgl_kernel or torch under {root} "
        "(is the base image the pinned lmsysorg/sglang dev-dsv41?)"
    )


def _dist_name(wheel: Path) -> str:
    return re.sub(r"[-_.]+", "_", wheel.name.split("-")[0]).lower()


def install_wheels(
    root: Path, out: Path, wheels: list[Path], interpreter: str = "/usr/bin/python3"
) -> list[str]:
    """`pip install --no-deps` of `wheels` into the image, written as a layer under `out`."""
    from installer import install
    from installer.destinations import SchemeDictionaryDestination
    from installer.sources import WheelFile

    site = site_packages(root)
    scheme = {
        "purelib": str(site),
        "platlib": str(site),
        "headers": "/usr/local/include/python3",
        "scripts": "/usr/local/bin",
        "data": "/usr/local",
    }
    installed: list[str] = []
    for wheel in wheels:
        name = _dist_name(wheel)
        with WheelFile.open(wheel) as source:
            with zipfile.ZipFile(wheel) as zf:
                new_files = {PurePosixPath(n) for n in zf.namelist()}
            # what pip uninstalls first: the files the installed version's RECORD lists
            for old in (root / site.relative_to("/")).glob("*.dist-info"):
                if _dist_name(Path(old.name)) != name:
                    continue
                record = old / "RECORD"
                lines = record.read_text().splitlines() if record.exists() else []
                paths = [line.split(",")[0] for line in lines if line]
                for rel in paths:
                    p = PurePosixPath(rel)
                    if p in new_files or p.parts[0] == old.name:
                        continue
                    target = PurePosixPath(os.path.normpath(site / p))
                    (out / target.parent.relative_to("/")).mkdir(parents=True, exist_ok=True)
                    (out / target.parent.relative_to("/") / f"{WHITEOUT}{target.name}").touch()
                wh = out / site.relative_to("/") / f"{WHITEOUT}{old.name}"
                wh.parent.mkdir(parents=True, exist_ok=True)
                wh.touch()
            destination = SchemeDictionaryDestination(
                scheme, interpreter=interpreter, script_kind="posix", destdir=str(out)
            )
            install(source, destination, {"INSTALLER": b"pip\n"})
        installed.append(wheel.name)
    return installed


def _logical_lines(text: str) -> list[str]:
    lines, current = [], ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        lines.append(current + line)
        current = ""
    if current:
        lines.append(current)
    return lines


def _final_stage(text: str) -> list[str]:
    lines = _logical_lines(text)
    starts = [i for i, line in enumerate(lines) if line.split(None, 1)[0].upper() == "FROM"]
    return lines[starts[-1] :] if starts else lines


def checks(dockerfile: Path) -> list[str]:
    """The final stage's RUN steps that check rather than build: python3 imports and tests."""
    out = []
    for line in _final_stage(dockerfile.read_text()):
        op, _, rest = line.partition(" ")
        if op.upper() != "RUN":
            continue
        cmd = " ".join(rest.split())
        if "python3 -c" in cmd and "import" in cmd or "/tests/test_" in cmd:
            out.append(cmd)
    if not out:
        raise SystemExit(f"checks: no import checks or tests in {dockerfile}")
    return out


def run(dockerfile: Path, text: str) -> str:
    hits = [
        " ".join(line.partition(" ")[2].split())
        for line in _final_stage(dockerfile.read_text())
        if line.partition(" ")[0].upper() == "RUN" and text in line
    ]
    if len(hits) != 1:
        raise SystemExit(f"run: {len(hits)} RUN steps of {dockerfile} mention {text!r}, expected one")
    return hits[0]


def image_env(archive: Path) -> dict[str, str]:
    """The Env of the image in a docker-archive (its config JSON), as a dict."""
    with tarfile.open(archive) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))
        config = json.load(outer.extractfile(manifest[0]["Config"]))
    return dict(item.split("=", 1) for item in (config.get("config") or {}).get("Env") or [])


def guest_argv(root: Path, workdir: str, env: dict[str, str], cmd: str, proot: str = "proot") -> list[str]:
    """CMD as the container would run it: inside ROOT, in WORKDIR, with exactly `env` (none of the
    build sandbox's variables, whose PATH names store paths the image does not have)."""
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", **env}
    mounts = ["-b", "/proc", "-b", "/dev", "-b", "/sys"]
    return [proot, "-r", str(root), *mounts, "-w", workdir, "/usr/bin/env", "-i",
            *(f"{k}={v}" for k, v in env.items()), "/bin/sh", "-c", cmd]  # fmt: skip


def in_image(root: Path, archive: Path, workdir: str, cmd: str) -> None:
    import subprocess

    proc = subprocess.run(guest_argv(root, workdir, image_env(archive), cmd), check=False)
    if proc.returncode != 0:
        raise SystemExit(f"in the image (exit {proc.returncode}): {cmd}")


def run_checks(dockerfile: Path, root: Path, archive: Path, env: dict[str, str] | None = None) -> int:
    """Each check as the Dockerfile runs it (sh -c in WORKDIR /opt/dsv41), inside ROOT, with the
    base image's Env: the Dockerfile sets its own ENV (PYTHONPATH with adapter/sitecustomize.py)
    only after these RUN steps. `env` adds variables (tests)."""
    import subprocess

    commands = checks(dockerfile)
    guest = {**image_env(archive), **(env or {})}
    for cmd in commands:
        print(f"image check: {cmd}", file=sys.stderr, flush=True)  # stdout is the count
        proc = subprocess.run(guest_argv(root, "/opt/dsv41", guest, cmd), check=False)
        if proc.returncode != 0:
            raise SystemExit(f"image check failed (exit {proc.returncode}): {cmd}")
    return count_tests(commands)


def check_env(dockerfile: Path, image_env: dict[str, str]) -> None:
    wanted = env(dockerfile)
    wrong = {k: (v, image_env.get(k)) for k, v in wanted.items() if image_env.get(k) != v}
    if wrong:
        lines = "\n".join(f"  {k}: Dockerfile {v!r}, image {h!r}" for k, (v, h) in sorted(wrong.items()))
        raise SystemExit(f"check-env: the image's Env differs from {dockerfile}'s ENV:\n{lines}")


def count_tests(commands: list[str]) -> int:
    return sum(len(re.findall(r"\btest_\w+\.(?:py|sh)\b", c)) for c in commands)


def env(dockerfile: Path) -> dict[str, str]:
    """The final stage's ENV (KEY=VALUE pairs; the legacy `ENV KEY VALUE` form too)."""
    result: dict[str, str] = {}
    for line in _final_stage(dockerfile.read_text()):
        op, _, rest = line.partition(" ")
        if op.upper() != "ENV":
            continue
        words = shlex.split(rest)
        if words and "=" not in words[0]:
            result[words[0]] = " ".join(words[1:])
            continue
        for word in words:
            key, _, value = word.partition("=")
            result[key] = value
    return result


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    verb, args = argv[0], argv[1:]
    if verb == "unpack":
        print(json.dumps(unpack(Path(args[0]), Path(args[1]))))
    elif verb == "site-packages":
        print(site_packages(Path(args[0])))
    elif verb == "install-wheels":
        print(json.dumps(install_wheels(Path(args[0]), Path(args[1]), [Path(a) for a in args[2:]])))
    elif verb == "overlay":
        overlay(Path(args[0]), Path(args[1]))
    elif verb == "run":
        print(run(Path(args[0]), args[1]))
    elif verb == "run-checks":
        print(run_checks(Path(args[0]), Path(args[1]), Path(args[2])))
    elif verb == "in-image":
        in_image(Path(args[0]), Path(args[1]), args[2], args[3])
    elif verb == "check-env":
        check_env(Path(args[0]), json.loads(args[1]))
    elif verb == "checks":
        print(json.dumps(checks(Path(args[0]))))
    elif verb == "env":
        print(json.dumps(env(Path(args[0])), sort_keys=True))
    else:
        print(f"unknown verb {verb}\n{__doc__}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
