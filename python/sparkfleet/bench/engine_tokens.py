"""Prompt sizes in the engine's own tokens, from its `/tokenize` endpoint (vLLM, SGLang).

Why: without the model's tokenizer.json a prompt is sized in words, and a "128-token" prompt was
318 tokens on a real model. An engine that offers POST /tokenize counts for us; one that
does not leaves the prompt sized in words, and the report says so (`prompt_sizing`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..base.errors import SparkfleetError
from .client import Endpoint, post_json

SIZED_LOCAL = "tokens (local tokenizer.json)"
SIZED_ENGINE = "tokens (the engine's /tokenize)"
SIZED_WORDS = "words (no tokenizer, no /tokenize: a word is one or more tokens)"


@dataclass(frozen=True)
class EngineTokenizer:
    """A `TokenCounter` backed by the server's POST /tokenize (the text as a completion prompt)."""

    endpoint: Endpoint

    def count(self, text: str) -> int:
        doc = post_json(
            self.endpoint,
            "/tokenize",
            {"model": self.endpoint.model, "prompt": text, "add_special_tokens": False},
            root=True,
            timeout=30.0,
        )
        count = doc.get("count") if isinstance(doc, dict) else None
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise SparkfleetError(f"{self.endpoint.server_root}/tokenize stopped answering with a count")
        return count


def engine_tokenizer(endpoint: Endpoint) -> EngineTokenizer | None:
    """The server's /tokenize as a counter, when it answers a probe with a plausible count."""
    doc = post_json(
        endpoint,
        "/tokenize",
        {"model": endpoint.model, "prompt": "a b c", "add_special_tokens": False},
        root=True,
    )
    count = doc.get("count") if isinstance(doc, dict) else None
    if isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= 5:
        return EngineTokenizer(endpoint)
    return None
