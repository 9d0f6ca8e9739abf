"""Benchmark prompts of a known word count, each behind a unique prefix.

Why unique prefixes: SGLang and vLLM cache KV by prompt prefix, so a benchmark that sends the same
prompt twice measures a cache hit, not prefill. Every prompt starts with a nonce naming the run and
the request. Words approximate tokens for English filler; the server's usage record gives the real
count, and that is what the metrics use.
"""

from __future__ import annotations

import itertools
import secrets

_FILLER_TEXT = (
    "the fleet of small machines hums in the rack while weights stream from local disks and every node "
    "keeps its own copy of the shards so that decode never waits on the network and the operator can "
    "sleep through the night shift knowing that each lane will answer when the morning traffic arrives "
    "with long documents careful questions and requests for code that must run the first time"
)
_ASK_TEXT = "Continue the story in plain prose without stopping:"
_FILLER = _FILLER_TEXT.split()
_ASK = _ASK_TEXT.split()


def run_nonce() -> str:
    """A short random id for one benchmark run (part of every prompt prefix)."""
    return secrets.token_hex(4)


def make_prompt(words: int, prefix: str) -> str:
    """A prompt of exactly `words` whitespace-separated words, starting with `prefix` (one word)."""
    if words < 1:
        raise ValueError("a prompt needs at least one word")
    head = [prefix.replace(" ", "-")]
    tail = _ASK if words > len(_ASK) + 1 else []
    body = list(itertools.islice(itertools.cycle(_FILLER), max(words - 1 - len(tail), 0)))
    return " ".join((head + body + tail)[:words])
