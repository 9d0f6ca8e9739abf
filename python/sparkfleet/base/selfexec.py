"""Start a Python child of our own (the agent, a rank's supervisor, the watchdog, the canary, the
gateway's main, `sparkfleet` itself) so that it imports the very modules this process imports.

Why not plain `sys.executable -m MODULE`: a Nix-built sparkfleet (pkgs/sparkfleet.nix,
buildPythonApplication) runs under nixpkgs' Python wrapper, which puts the application and its
dependencies on sys.path INSIDE the wrapped script (its first line runs
`functools.reduce(lambda k, p: site.addsitedir(p, k), [...site-packages...], site._init_pathinfo())`;
nixpkgs pkgs/development/interpreters/python/wrap.sh and mk-python-derivation.nix), not in the
environment. `sys.executable` is then the bare store interpreter: a child started with it alone
finds neither sparkfleet nor click (`No module named sparkfleet` on every deployed host).

How: the child gets this process's search path the same way the wrapper gave it to us, inside the
interpreter (`-c`, then runpy runs the module as `-m` would), NOT through PYTHONPATH. PYTHONPATH
would be inherited by everything below the child: a rank supervisor's serve command (whose
environment must be exactly what the recipe says), a container engine, the canary in its image.
The argv carries only directory names, never a secret.
"""

from __future__ import annotations

import sys

# The child's own sys.path[0] (its cwd, as with `-m`) first, then ours in our order, then whatever
# of its own default path we do not already have: a stale copy elsewhere cannot shadow ours.
_PATH = (
    "import runpy, sys; p = {path!r}; "
    "sys.path[:] = sys.path[:1] + p + [e for e in sys.path[1:] if e not in p]; "
)
_MODULE = _PATH + "m = sys.argv.pop(1); runpy.run_module(m, run_name='__main__', alter_sys=True)"
_SCRIPT = _PATH + "sys.argv.pop(0); runpy.run_path(sys.argv[0], run_name='__main__')"


def search_path() -> list[str]:
    """This process's module search path, as a child must see it (empty entries, i.e. cwd, left out)."""
    return [p for p in sys.path if p]


def module_argv(module: str, *args: str) -> list[str]:
    """`python -m MODULE ARGS...` with this interpreter and this process's search path."""
    return [sys.executable, "-c", _MODULE.format(path=search_path()), module, *args]


def script_argv(script: str, *args: str) -> list[str]:
    """`python SCRIPT ARGS...` with this interpreter and this process's search path."""
    return [sys.executable, "-c", _SCRIPT.format(path=search_path()), script, *args]
