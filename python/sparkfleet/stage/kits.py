"""A lane's pinned kit checkout on its host ([[launch.trees]]): cloned, checked, then named.

Why: the EXL3 lane binds kit code that is not in its image from <state_dir>/kits/<pin>/<rev>/ on
each host, and launch refuses a host without it. `stage HOST` runs on the host and puts it there:
  1. under the kits' stage lock (base/lock.py, so two runs on one host never meet), sweep the
     temp clones a killed run left (TEMP_MARK names, atomic.temp_name);
  2. an existing checkout at the pinned rev, clean (`git status --porcelain --ignored` empty: no
     file changed, added, or hidden by the kit's .gitignore) and holding every file the trees
     need, as pinned (kittrees.kit_tree_problems), is left alone;
  3. otherwise `git clone --no-checkout URL TMP` + `git -C TMP checkout --detach REV` into a hidden
     sibling, HEAD checked against the rev (which may be abbreviated), the trees' files checked,
     the tree fsynced, and only then renamed to its final name;
  4. a wrong or dirty checkout is never changed in place (a running lane binds it): it is moved
     aside to <rev>.replaced-<UTC time>, kept and reported, and the fresh clone takes its name.
A `kill -9` anywhere leaves the final name absent, the old checkout or the new one, whole; the
rerun sweeps the temp and converges. A clone that fails (an unreachable URL, a rev the repository
lacks, a file the trees need missing) raises naming the host, pin, URL and rev, leaving nothing.
`verify HOST` asks step 2's question (checkout_problem, the one test of a checkout) of each
checkout the host needs, with no lock and no sweep: it changes nothing (verify_kits). `doctor HOST`
asks the same through the node's agent (node/agent.py's doctor action runs verify_kits there).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..base.atomic import ensure_dir, fsync_dir, fsync_tree, is_temp_name, temp_name
from ..base.errors import ExitCode, SparkfleetError, from_os_error
from ..base.lock import hub_lock
from ..fleet.kittrees import KITS_DIR, KitCheckout, KitVerdict, kit_tree_problems
from ..pins.common import Unreachable, run_tool

if TYPE_CHECKING:
    from .execute import StageProgress

CLONE_TIMEOUT_S = 1800  # a kit repository over a slow link; git itself never prompts (run_tool)


@dataclass
class KitResult:
    """What staging did (or, in a dry run, would do) with one pinned checkout on this host."""

    pin: str
    repo: str
    rev: str
    url: str
    path: str
    state: str  # present (left alone) | fetched | replaced; dry run: present | fetch | replace
    why: str = ""  # why a checkout there is replaced: not at the rev, changed, lacking files
    kept: str = ""  # where a replaced checkout was moved (a running lane may still bind it)
    head: str = ""  # the checkout's full commit
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def _git(*args: str, timeout: float = 120) -> str:
    return run_tool(["git", *args], timeout=timeout)


def checkout_problem(path: Path, co: KitCheckout) -> str | None:
    """Why the checkout at `path` is not the pinned one (None: it is, clean and complete)."""
    return inspect_checkout(path, co)[1]


def inspect_checkout(path: Path, co: KitCheckout) -> tuple[str, str | None]:
    """The checkout's full commit ("" where git cannot tell) and checkout_problem's answer."""
    if not path.is_dir() or path.is_symlink():
        return "", "absent" if not path.exists() and not path.is_symlink() else "not a directory"
    try:
        head = _git("--no-optional-locks", "-C", str(path), "rev-parse", "HEAD").strip()
        # --ignored: a file the kit's .gitignore hides (a planted __pycache__/*.pyc beside the
        # serving code the container puts on its PYTHONPATH) would run as the kit's all the same
        status = ("status", "--porcelain", "--ignored")
        changed = _git("--no-optional-locks", "-C", str(path), *status).splitlines()
    except Unreachable as exc:
        return "", f"not a git checkout ({exc.message})"
    if not head.startswith(co.rev):
        return head, f"at {head[:12]}, not {co.rev}"
    if changed:
        return head, f"changed in place ({len(changed)} paths, e.g. {changed[0].strip()})"
    lacks = [p for t in co.trees for p in kit_tree_problems(path, t)]
    return head, f"lacks {', '.join(lacks[:3])}" if lacks else None


def verify_kits(
    checkouts: list[KitCheckout], state_dir: Path, host: str, lane: str | None = None
) -> list[KitVerdict]:
    """Check each checkout as staging would before leaving it alone (checkout_problem), changing
    nothing: no lock, no sweep, and git reads with --no-optional-locks (a running lane binds it)."""
    out = []
    for co in checkouts:
        path = co.path(state_dir)
        why = checkout_problem(path, co)
        fix = "" if why is None else co.fix(state_dir, host, lane)
        out.append(KitVerdict(co.pin, co.repo, co.rev, co.url, str(path), why is None, why or "", fix))
    return out


def sweep(kits: Path) -> int:
    """Remove the temp clones a killed run left under kits/<pin>/ (ours only: TEMP_MARK names)."""
    removed = 0
    for pin_dir in kits.iterdir() if kits.is_dir() else ():
        if pin_dir.is_dir() and not pin_dir.is_symlink():
            for entry in pin_dir.iterdir():
                if not is_temp_name(entry.name):
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    # a `kill -9` of the stage alone may leave its git still writing here: what
                    # cannot go now goes on a later run (the fresh clone takes another temp name)
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
                removed += 1
    return removed


def _refuse(co: KitCheckout, host: str, what: str, code: int, detail: str) -> SparkfleetError:
    return SparkfleetError(
        f"{host}: kit pin {co.pin} ({co.repo}@{co.rev}) from {co.url}: {what}: {detail}",
        hint=(
            "check the pin's rev and url in hosts/fleet.toml (hosts without internet clone from a "
            'mirror: url = "/path/on/the/nas/repo.git"), and that the host reaches the url; '
            "nothing was changed on the host"
        ),
        exit_code=code,
    )


def clone(co: KitCheckout, tmp: Path, host: str) -> str:
    """Clone the pin into `tmp` at its rev and check it there; the full commit, or a refusal."""
    try:
        _git("clone", "--quiet", "--no-checkout", "--", co.url, str(tmp), timeout=CLONE_TIMEOUT_S)
    except Unreachable as exc:
        raise _refuse(co, host, "cannot clone", ExitCode.UNREACHABLE, exc.message) from None
    try:
        _git("-C", str(tmp), "-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach",
             f"{co.rev}^{{commit}}", timeout=CLONE_TIMEOUT_S)  # fmt: skip
        head = _git("-C", str(tmp), "rev-parse", "HEAD").strip()
    except Unreachable as exc:
        raise _refuse(co, host, "no such commit there", ExitCode.REFUSED, exc.message) from None
    if not head.startswith(co.rev):
        raise _refuse(co, host, "wrong commit", ExitCode.REFUSED, f"checked out {head}")
    lacks = [p for t in co.trees for p in kit_tree_problems(tmp, t)]
    if lacks:
        shown = ", ".join(str(Path(p).relative_to(tmp)) for p in lacks[:3])
        raise _refuse(co, host, "the commit lacks what the lane binds", ExitCode.REFUSED, shown)
    return head


def plan_kits(checkouts: list[KitCheckout], state_dir: Path) -> list[KitResult]:
    """The dry run: what staging would do with each checkout; reads only, asks no remote."""
    out = []
    for co in checkouts:
        path = co.path(state_dir)
        why = checkout_problem(path, co)
        state = "present" if why is None else "fetch" if why == "absent" else "replace"
        out.append(KitResult(co.pin, co.repo, co.rev, co.url, str(path), state, why or ""))
    return out


def stage_kits(
    checkouts: list[KitCheckout],
    state_dir: Path,
    host: str,
    *,
    wait_seconds: float = 0.0,
    progress: StageProgress | None = None,
) -> list[KitResult]:
    """Bring every checkout to <state_dir>/kits/<pin>/<rev>/ on this host (see the module doc)."""
    if not checkouts:
        return []
    kits = Path(state_dir) / KITS_DIR
    try:
        ensure_dir(kits)
        with hub_lock(kits, wait_seconds):
            sweep(kits)
            return [_one(co, co.path(state_dir), host, progress) for co in checkouts]
    except OSError as exc:
        err = from_os_error(exc, f"staging kit checkouts into {kits}")
        if err is None:
            raise
        raise err from exc


def _one(co: KitCheckout, final: Path, host: str, progress: StageProgress | None) -> KitResult:
    start = time.monotonic()
    result = KitResult(co.pin, co.repo, co.rev, co.url, str(final), "present")
    if progress is not None:
        progress.phase(f"kit {co.pin}@{co.rev[:10]}", 0, 1)
    head, why = inspect_checkout(final, co)
    if why is None:
        result.head = head  # asked once: the check already read it
    else:
        made = not final.parent.exists()
        ensure_dir(final.parent)
        tmp = temp_name(final)
        try:
            result.head = clone(co, tmp, host)
            fsync_tree(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            if made:
                with contextlib.suppress(OSError):
                    final.parent.rmdir()  # nothing left behind: not even the pin's folder
            raise
        if why != "absent":  # never changed in place: moved aside whole, kept for a lane binding it
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            kept = final.with_name(f"{final.name}.replaced-{stamp}-{os.urandom(3).hex()}")
            os.rename(final, kept)
            result.state, result.why, result.kept = "replaced", why, str(kept)
        else:
            result.state = "fetched"
        os.rename(tmp, final)
        fsync_dir(final.parent)
    if progress is not None:
        progress.item_done(str(final))
    result.seconds = round(time.monotonic() - start, 3)
    return result
