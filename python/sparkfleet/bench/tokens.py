"""Token accounting for a streamed response, and where each count came from.

Why this matters: with speculative decoding (DSpark) one SSE chunk carries several tokens, so
counting chunks under-counts and anything derived from "chunks per second" is wrong. In order of
preference we use (1) the server's cumulative usage on every chunk (`continuous_usage_stats`),
exact per chunk; (2) the final usage record, exact in total (the first chunk's share is then
the total split by the characters each chunk carried: real servers send the prefill's one token
alone and then several accepted tokens per step, so "total / chunks" would be wrong); (3) a local
tokenizer on the streamed text; (4) an estimate (≈4 characters per token). The source is
recorded in every result so a report says how much to trust a number.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..base.errors import SparkfleetError
from .client import StreamResult

CONTINUOUS = "continuous_usage"
FINAL = "final_usage"
TOKENIZER = "tokenizer"
ESTIMATE = "estimate_chars_div_4"
SOURCES = (CONTINUOUS, FINAL, TOKENIZER, ESTIMATE)


class TokenCounter(Protocol):
    def count(self, text: str) -> int: ...


@dataclass(frozen=True)
class LocalTokenizer:
    """A Hugging Face `tokenizer.json` on disk (file or folder holding one); never downloads."""

    path: Path

    def __post_init__(self) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise SparkfleetError(
                "--tokenizer needs the `tokenizers` package", hint="pip install tokenizers"
            ) from None
        file = self.path / "tokenizer.json" if self.path.is_dir() else self.path
        if not file.is_file():
            raise SparkfleetError(f"no tokenizer.json at {self.path}")
        object.__setattr__(self, "_tok", Tokenizer.from_file(str(file)))

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class TokenCount:
    """Completion tokens of one response, the share of the first content chunk, and the source."""

    completion_tokens: int
    first_chunk_tokens: float
    source: str


def count_completion(result: StreamResult, tokenizer: TokenCounter | None = None) -> TokenCount | None:
    """Count a response's tokens by the best source it offers; None when nothing was streamed."""
    chunks = result.chunks
    if not chunks:
        return None
    final_total = None
    if result.usage and result.usage.get("completion_tokens") is not None:
        final_total = int(result.usage["completion_tokens"])
    if result.continuous_usage:
        last = chunks[-1].usage_completion_tokens or 0
        total = max(last, final_total or 0)
        return TokenCount(total, float(chunks[0].usage_completion_tokens or 0), CONTINUOUS)
    if final_total is not None:
        return TokenCount(final_total, _first_share(result, final_total, tokenizer), FINAL)
    if tokenizer is not None:
        return TokenCount(
            tokenizer.count(result.output_text), float(tokenizer.count(chunks[0].text)), TOKENIZER
        )
    total = max(len(chunks), round(len(result.output_text) / 4))
    return TokenCount(total, _first_share(result, total, None), ESTIMATE)


def _first_share(result: StreamResult, total: int, tokenizer: TokenCounter | None) -> float:
    """Tokens in the first content chunk when only the total is known.

    A tokenizer counts it; otherwise the total is split by characters (at least one token, and no
    more than leaves one per later chunk): a 1-token first chunk ahead of 3-token steps gets ~1.
    """
    chunks = result.chunks
    if tokenizer is not None:
        return float(max(1, tokenizer.count(chunks[0].text)))
    chars = sum(len(c.text) for c in chunks)
    share = total * len(chunks[0].text) / chars if chars else total / len(chunks)
    return min(max(share, 1.0), float(max(total - (len(chunks) - 1), 1)))
