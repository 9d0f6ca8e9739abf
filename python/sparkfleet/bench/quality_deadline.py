"""tool-eval-bench with a deadline on each whole request, streaming included.

Why: tool-eval-bench's `--timeout` bounds the silence between streamed bytes (an httpx read
timeout), on purpose: "a model that thinks for minutes while still emitting stays alive". A lane
that streams 16,384 tokens at 50 tok/s then holds one request for five and a half minutes under
`--timeout 120`, and a report's `quality.request_timeout_s 120` would say what did not happen.

How: this runs the pinned tool-eval-bench (quality.py refuses any other version before starting
it) with every chat request of its OpenAI-compatible adapter under `asyncio.wait_for`. Past the
deadline the request is cancelled — its connection closes, so the engine stops generating — and
the harness records the scenario as a timeout: its own infrastructure class, excluded from the
score and listed as such, never scored as the model's wrong answer.

`python -m sparkfleet.bench.quality_deadline SECONDS ARGS...` runs `tool-eval-bench ARGS...`.
"""

from __future__ import annotations

import asyncio
import math
import sys
from typing import Any


class RequestDeadline(TimeoutError):
    """A request ran past its deadline (a TimeoutError: tool-eval-bench classifies it a timeout)."""


def bound(adapter: type, seconds: float) -> None:
    """Every `adapter.chat_completion` call ends within `seconds`, connect to last byte."""
    original = adapter.chat_completion

    async def chat_completion(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await asyncio.wait_for(original(self, *args, **kwargs), seconds)
        except TimeoutError:
            raise RequestDeadline(
                f"the request ran past its {seconds:g} s deadline (quality.request_timeout_s)"
            ) from None

    adapter.chat_completion = chat_completion


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        seconds = float(args[0])
    except (IndexError, ValueError):
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        sys.exit("usage: python -m sparkfleet.bench.quality_deadline SECONDS [tool-eval-bench args]")
    from tool_eval_bench.adapters.openai_compat import OpenAICompatibleAdapter
    from tool_eval_bench.cli.dispatch import main as tool_eval_bench

    bound(OpenAICompatibleAdapter, seconds)
    sys.argv = ["tool-eval-bench", *args[1:]]
    tool_eval_bench()


if __name__ == "__main__":
    main()
