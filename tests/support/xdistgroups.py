"""`--dist loadgroup` that keeps its promise on pytest 9.2: tests of a module marked
`pytest.mark.xdist_group(NAME)` run on one worker, the rest wherever a worker is free.

Why: pytest-xdist 3.8 tells the scheduler a test's group by appending "@NAME" to the test's node id
on the worker, and pytest 9.2 no longer lets a node id be rewritten that way, so loadgroup silently
spreads a group over every worker (pytest-dev/pytest-xdist#1386, open; fix proposed in #1388). A
module-scoped fleet would then be built once per worker, and the session's vLLM engine booted twice.

Here the scheduler (on the controller, which collects nothing) reads the group from the test
module's own text: the first `xdist_group("NAME")` in the file names the group of all its tests (the
suite marks whole modules, through `pytestmark`). A node id that does carry xdist's "@NAME" suffix
(an xdist or pytest where #1386 is fixed) keeps xdist's own answer.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

GROUP_MARK = re.compile(r"""xdist_group\(\s*(?:name\s*=\s*)?["']([^"']+)["']""")


@functools.cache
def module_group(path: Path) -> str | None:
    """The group the module at `path` names in an `xdist_group(...)` mark, or None."""
    try:
        m = GROUP_MARK.search(path.read_text(errors="replace"))
    except OSError:
        return None
    return m.group(1) if m else None


def make_scheduler(config, log):
    """A LoadGroupScheduling whose scopes come from the modules' marks (see the module docstring)."""
    from xdist.scheduler import LoadGroupScheduling

    root = Path(config.rootpath)

    class ModuleGroupScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            if scope != nodeid:  # xdist's own "@NAME" suffix made it through
                return scope
            return module_group(root / nodeid.split("::", 1)[0]) or nodeid

    return ModuleGroupScheduling(config, log)
