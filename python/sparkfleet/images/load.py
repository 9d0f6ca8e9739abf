"""`sparkfleet image load LANE`: the built image into docker/podman on every host of the lane.

Facts → plan → action → record. The build's ID is read from the archive itself; each host says
which ID it holds (agent `image-state`); a host already holding the build is left alone (rerun =
no-op); every other host is shown its change, then gets the archive streamed over ssh into
`<engine> load` and records the new ID (agent `image-commit`), keeping the previous one tagged.
The operator's record (`<state>/images/<lane>.json`, written atomically) is what launch and
doctor compare each host against.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..base.atomic import write_bytes
from ..base.errors import SparkfleetError
from ..fleet.inventory import Inventory, state_dir_of
from ..remote.hosts import RunResult, SshHost, check_reachable, connect, fan_out
from ..remote.nodecall import ask
from .archive import BuildImage, inspect_build, open_stream
from .record import CONTAINER_ENGINES, LaneImage, operator_record_path, read_operator_record, read_push_record
from .requests import ImageCommitRequest, ImagePullRequest, ImageStateRequest


@dataclass
class HostLoad:
    host: str
    engine: str
    before: str | None  # the ID the host recorded before this run
    action: str  # "unchanged" | "load" | "loaded" | "failed"
    image_id: str | None = None
    previous_image_id: str | None = None
    seconds: float | None = None
    detail: str = ""


@dataclass
class LoadReport:
    lane: str
    build: BuildImage
    hosts: list[HostLoad] = field(default_factory=list)
    dry_run: bool = False
    record: str | None = None

    @property
    def ok(self) -> bool:
        return all(
            h.action in ("unchanged", "loaded") or (self.dry_run and h.action == "load") for h in self.hosts
        )


def _engine(image: LaneImage) -> str:
    """The container engine that loads the lane's image (a lane run as processes has no image)."""
    if image.runtime not in CONTAINER_ENGINES:
        raise SparkfleetError(
            f"lane {image.lane} runs with the {image.runtime} runtime: it has no image to load"
        )
    return image.runtime


def _remote_argv(runner, argv: list[str]) -> list[str]:
    return runner.ssh_argv(argv) if isinstance(runner, SshHost) else argv


CHUNK = 1 << 20


def stream_into(
    build: BuildImage, runner, engine: str, timeout: float, on_bytes: Callable[[int], None]
) -> str:
    """`<engine> load` on the host, fed the archive chunk by chunk (counted); returns its output."""
    argv = [engine, "load"]
    deadline = time.monotonic() + timeout
    with open_stream(Path(build.source), build.kind) as stream:
        proc = subprocess.Popen(
            _remote_argv(runner, argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=False,
        )  # fmt: skip
        assert proc.stdin is not None
        try:
            while chunk := stream.read(CHUNK):
                if time.monotonic() > deadline:
                    proc.kill()
                    raise SparkfleetError(f"{runner.name}: {engine} load timed out after {timeout:.0f} s")
                proc.stdin.write(chunk)
                on_bytes(len(chunk))
        except BrokenPipeError:
            pass  # the engine (or ssh) gave up; its exit status and stderr say why
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()  # end of the archive: the engine finishes the load
        proc.stdin = None  # closed here; communicate() only drains stdout/stderr
        out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    res = check_reachable(_as_result(runner.name, argv, proc.returncode, out, err))
    if not res.ok:
        raise SparkfleetError(f"{runner.name}: {engine} load failed: {res.stderr.strip()[-300:]}")
    return res.stdout


def _as_result(host: str, argv: list[str], returncode: int, out: bytes, err: bytes) -> RunResult:
    return RunResult(
        host, tuple(argv), returncode, out.decode(errors="replace"), err.decode(errors="replace")
    )


def _pull(
    runner,
    lane: str,
    name: str,
    engine: str,
    build: BuildImage,
    on_event: Callable[[str], None],
    pushed: dict | None = None,
) -> str | None:
    """Pull by digest when `image push` put this very build in the registry (or `pushed`, a
    release's image, names it); None: stream instead."""
    pushed = pushed or read_push_record(lane)
    if pushed is None or pushed.get("image_id") != build.image_id:
        return None
    req = ImagePullRequest(engine, pushed["registry"], pushed["repo"], pushed["digest"])
    try:
        ans = ask(runner, req, timeout=3600)
    except SparkfleetError as exc:
        on_event(f"{name}: registry pull failed ({exc.message}); streaming over ssh instead")
        return None
    on_event(f"{name}: {'pulled' if ans['pulled'] else 'already holds'} {ans['repo_digest']}")
    return ans["repo_digest"]


def _load_host(
    inv: Inventory,
    lane: str,
    name: str,
    engine: str,
    build: BuildImage,
    dry_run: bool,
    timeout_s: float,
    on_event: Callable[[str], None],
    on_bytes: Callable[[str, int], None],
    pushed: dict | None = None,
) -> HostLoad:
    """One host: what it holds, then (if it differs) show, pull or stream, record."""
    host = inv.host(name)
    runner = connect(host)
    req = ImageStateRequest(lane, str(state_dir_of(host)), engine, expect=build.image_id)
    try:
        st = ask(runner, req)
    except SparkfleetError as exc:
        on_event(f"{name}: {exc.message}")
        return HostLoad(name, engine, None, "failed", detail=exc.message)
    before = st.get("recorded")
    if before == build.image_id and st.get("present"):
        on_event(f"{name}: already holds {build.image_id[:19]}…; nothing to do")
        previous = (st.get("record") or {}).get("previous_image_id")
        return HostLoad(name, engine, before, "unchanged", before, previous)
    held = f"{before[:19]}…" if before else "none"
    on_event(
        f"{name}: {engine} load {build.image_id[:19]}… (host holds {held}; "
        f"the old image stays tagged sparkfleet/{lane}:previous)"
    )
    if dry_run:
        return HostLoad(name, engine, before, "load", build.image_id, before)
    t0 = time.monotonic()
    try:
        repo_digest = _pull(runner, lane, name, engine, build, on_event, pushed)
        if repo_digest is None and build.kind == REGISTRY_KIND and not st.get("expect_present"):
            raise SparkfleetError(f"{name}: the registry pull failed, and a release has no archive to stream")
        if repo_digest is None and not st.get("expect_present"):
            stream_into(build, runner, engine, timeout_s, lambda n: on_bytes(name, n))
        commit = ImageCommitRequest(
            req.lane, req.state_dir, engine, build.image_id, build.source, repo_digest
        )
        rec = ask(runner, commit)["record"]
    except SparkfleetError as exc:
        on_event(f"{name}: FAILED: {exc.message}")
        return HostLoad(name, engine, before, "failed", detail=exc.message)
    seconds = round(time.monotonic() - t0, 2)
    on_event(f"{name}: loaded in {seconds:.1f} s")
    return HostLoad(name, engine, before, "loaded", rec["image_id"], rec.get("previous_image_id"), seconds)


def load(
    inv: Inventory,
    image: LaneImage,
    source: Path,
    *,
    dry_run: bool = False,
    timeout_s: float = 3600,
    on_event: Callable[[str], None] = lambda _m: None,
    on_bytes: Callable[[str, int], None] = lambda _host, _n: None,
    jobs: int = 4,
) -> LoadReport:
    """Load the build at `source` into every host of `image.lane` that does not hold it; record the IDs.

    `image` is the lane's image facts (its launch recipe is one). `on_event` gets a line before
    each change; `on_bytes(host, n)` counts the archive streamed. Up to `jobs` hosts load at once,
    each from its own run of the stream script.
    """
    lane = image.lane
    engine = _engine(image)
    on_event(f"reading {source} for its image ID")
    build = inspect_build(source)
    on_event(f"build image {build.image_id} ({', '.join(build.repo_tags) or 'untagged'})")
    report = LoadReport(lane, build, dry_run=dry_run)

    def one(name: str) -> HostLoad:
        return _load_host(inv, lane, name, engine, build, dry_run, timeout_s, on_event, on_bytes)

    names = list(inv.lane(lane).hosts)
    report.hosts = fan_out(one, names, limit=jobs)  # lane order, whatever order they finish in
    if not dry_run:
        report.record = str(_write_operator_record(image, build, report.hosts))
    return report


REGISTRY_KIND = "registry"  # a BuildImage that exists only in the registry (a release's image)


def load_pushed(
    inv: Inventory,
    image: LaneImage,
    pushed: dict,
    *,
    on_event: Callable[[str], None] = lambda _m: None,
    jobs: int = 4,
) -> LoadReport:
    """Every host of the lane pulls `pushed` (registry, repo, digest, image_id: a release's image)
    and records it; the operator record then names it as the lane's build, so `launch` runs it."""
    lane = image.lane
    engine = _engine(image)
    ref = f"{pushed['registry']}/{pushed['repo']}@{pushed['digest']}"
    build = BuildImage(ref, REGISTRY_KIND, pushed["image_id"], ())
    report = LoadReport(lane, build)

    def one(name: str) -> HostLoad:
        return _load_host(inv, lane, name, engine, build, False, 3600, on_event, lambda _h, _n: None, pushed)

    names = list(inv.lane(lane).hosts)
    report.hosts = fan_out(one, names, limit=jobs)
    failed = [h for h in report.hosts if h.action == "failed"]
    if failed:
        raise SparkfleetError(
            f"lane {lane}: {ref} could not be brought to "
            + "; ".join(f"{h.host}: {h.detail}" for h in failed),
            hint="is the registry up and its CA installed? (docs/images.md)",
        )
    report.record = str(_write_operator_record(image, build, report.hosts))
    return report


def _write_operator_record(image: LaneImage, build: BuildImage, hosts: list[HostLoad]) -> Path:
    """Merge this run into the lane's record: the build, and per host what it holds now."""
    lane = image.lane
    path = operator_record_path(lane)
    old = read_operator_record(lane) or {}
    per_host = dict(old.get("hosts") or {})
    for h in hosts:
        if h.action in ("loaded", "unchanged"):
            per_host[h.host] = {"image_id": h.image_id, "previous_image_id": h.previous_image_id,
                                "engine": h.engine, "at": time.time()}  # fmt: skip
    doc = {
        "lane": lane,
        "package": image.image_build,
        "build": {
            "source": build.source,
            "kind": build.kind,
            "image_id": build.image_id,
            "repo_tags": list(build.repo_tags),
            "at": time.time(),
        },  # fmt: skip
        "previous_build": old.get("build")
        if (old.get("build") or {}).get("image_id") != build.image_id
        else old.get("previous_build"),
        "hosts": per_host,
    }
    write_bytes(path, (json.dumps(doc, indent=2) + "\n").encode())
    return path
