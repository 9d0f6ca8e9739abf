"""Launch tests: optional per-call timing of agent calls (SPARKFLEET_TEST_TIMING=1)."""

from __future__ import annotations

import os
import sys
import time

import pytest


@pytest.fixture(autouse=True)
def _agent_timing(monkeypatch):
    if not os.environ.get("SPARKFLEET_TEST_TIMING"):
        yield
        return
    from sparkfleet.remote import nodecall

    real = nodecall.call_agent

    def timed(runner, action, request, timeout=120):
        t = time.monotonic()
        try:
            return real(runner, action, request, timeout)
        finally:
            sys.__stderr__.write(f"[agent] {runner.name} {action} {time.monotonic() - t:.2f}s\n")

    # every controller module asks a node through nodecall's one client (`ask`, `ask_host`)
    monkeypatch.setattr(nodecall, "call_agent", timed)
    yield
