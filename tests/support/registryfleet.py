"""The fleet registry for real, as docs/images.md sets it up: `registry init` (the fleet CA, both
configs, the push login) and `sparkfleet registry serve --json` (both listeners, supervised) in a
network namespace host of its own; the operator's side uses the documented layout as it is
(`<state>/registry/ca/`, which also holds the CA's key; `<state>/registry/push-auth.json`).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sparkfleet.images.registry import Registry
from sparkfleet.images.registry_host import init

try:
    from support.fleetnet import FleetNet, NetnsHost
except ImportError:  # tests/ imported as a package
    from tests.support.fleetnet import FleetNet, NetnsHost


@dataclass
class ServedRegistry:
    reg: Registry  # the operator's view: pull address, the CA dir `registry init` made, the push login
    host: NetnsHost
    state: Path  # the SPARKFLEET_STATE_DIR `registry init` wrote under
    files: dict[str, str]  # what `registry init` returned
    ready: dict  # `registry serve --json`'s first line: each listener's role, address, config and pid
    log: Path
    proc: subprocess.Popen

    def stop(self, timeout: float = 20) -> tuple[int, dict]:
        """SIGTERM `registry serve` (by PID); its exit code and its last JSON line."""
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, json.loads(out.strip().splitlines()[-1])


def _first_line(proc: subprocess.Popen, timeout: float) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        raise TimeoutError(f"`registry serve` printed nothing in {timeout:g} s")
    return proc.stdout.readline()


@contextmanager
def served_registry(fleetnet: FleetNet, tmp: Path, name: str, port: int = 5000) -> Iterator[ServedRegistry]:
    """A registry served at <netns addr>:port (pulls) and port+1 (pushes); stopped by its PID
    (SIGTERM, which `registry serve` passes to both listeners) and its host removed, even on failure."""
    host = fleetnet.add_host(name)
    proc = None
    ready: dict = {}
    log = tmp / f"{name}-serve.log"
    try:
        state = tmp / f"{name}-operator"
        files = init(state, f"{host.addr}:{port}", tmp / f"{name}-storage")  # `registry init`
        with open(log, "wb") as err:
            proc = subprocess.Popen(
                host.exec_argv(sys.executable, "-m", "sparkfleet", "registry", "serve", "--json"),
                env={**os.environ, "SPARKFLEET_STATE_DIR": str(state)}, stdout=subprocess.PIPE,
                stderr=err, stdin=subprocess.DEVNULL, text=True,
            )  # fmt: skip
        line = _first_line(proc, 60)
        assert line, f"registry serve ended ({proc.wait()}): {log.read_text()}"
        ready = json.loads(line)
        reg = Registry(files["address"], state / "registry" / "ca", files["push_address"],
                       Path(files["push_auth"]))  # fmt: skip
        yield ServedRegistry(reg, host, state, files, ready, log, proc)
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                for lis in ready.get("listeners", []):  # its children, by the PIDs it reported
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(lis["pid"], signal.SIGKILL)
        fleetnet.remove_host(host)
