"""Benchmark prompts that look like real use — prose, code and JSON — each unique and of a known size.

Why real-looking text: speculative decoding accepts more draft tokens on predictable text (a
repeated filler word reads far faster than prose would; peers' "cold prefill" figures sat on one
hot row for the same reason), so a bench on filler flatters the lane. The words come from
public-domain texts the package ships (corpus/public-domain.txt: Lincoln's Gettysburg Address and
the Preamble of the US Constitution), laid out in turn as prose paragraphs, Python functions and
JSON records; nothing is downloaded at run time.

Why unique: SGLang and vLLM cache KV by prompt prefix, so a benchmark that sends the same prompt
twice measures a cache hit, not prefill. Every prompt starts with a nonce naming the run and the
request, and starts at a different place in the corpus.

Size: without a tokenizer a prompt has exactly N whitespace-separated words (the demo server's
token); with the model's own tokenizer (`tokens.LocalTokenizer`, offline) it has the most words
whose token count stays within N tokens.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import secrets
from collections.abc import Iterator
from functools import cache
from importlib import resources

from .tokens import TokenCounter

KINDS = ("prose", "code", "json")
_ASK_TEXT = "Continue the text above without stopping:"
_ASK = _ASK_TEXT.split()
_WORD = re.compile(r"\S+")


@cache
def sentences() -> tuple[str, ...]:
    """The corpus, one sentence per item (comment lines dropped)."""
    text = resources.files(__package__).joinpath("corpus/public-domain.txt").read_text(encoding="utf-8")
    body = " ".join(line for line in text.splitlines() if line.strip() and not line.startswith("#"))
    return tuple(s.strip() for s in re.split(r"(?<=\.)\s+", body) if s.strip())


def _identifier(sentence: str, n: int) -> str:
    words = [re.sub(r"\W", "", w).lower() for w in sentence.split()]
    return "_".join(w for w in words if w)[:32].strip("_") or f"block_{n}"


def _prose(i: int) -> str:
    s = sentences()
    return " ".join(s[(i + k) % len(s)] for k in range(3))


def _code(i: int) -> str:
    s = sentences()[i % len(sentences())]
    return (
        f"def {_identifier(s, i)}_{i}(text: str) -> dict[str, int]:\n"
        f'    """{s}"""\n'
        "    counts: dict[str, int] = {}\n"
        "    for word in text.split():\n"
        '        key = word.strip(",.;:-").lower()\n'
        "        counts[key] = counts.get(key, 0) + 1\n"
        "    return counts\n"
    )


def _json(i: int) -> str:
    s = sentences()[i % len(sentences())]
    words = s.split()
    record = {"id": i, "sentence": s, "words": len(words), "first": words[0], "last": words[-1]}
    return json.dumps(record, indent=2)


_MAKERS = {"prose": _prose, "code": _code, "json": _json}


def blocks(start: int, kind: str = "mixed") -> Iterator[str]:
    """Endless text blocks from corpus position `start`: one kind, or prose, code, json in turn."""
    kinds = KINDS if kind == "mixed" else (kind,)
    if any(k not in _MAKERS for k in kinds):
        raise ValueError(f"unknown prompt kind {kind!r} (one of {', '.join(KINDS)} or mixed)")
    for n in itertools.count():
        yield _MAKERS[kinds[n % len(kinds)]](start + n)


def run_nonce() -> str:
    """A short random id for one benchmark run (part of every prompt prefix)."""
    return secrets.token_hex(4)


def _body(prefix: str, words: int, kind: str) -> str:
    """At least `words` words of corpus text, starting at a place that depends on `prefix`."""
    start = int.from_bytes(hashlib.sha256(prefix.encode()).digest()[:4], "big") % len(sentences())
    parts, count = [], 0
    for block in blocks(start, kind):
        parts.append(block)
        count += len(block.split())
        if count >= words:
            break
    return "\n\n".join(parts)


def _cut(text: str, words: int) -> str:
    """The first `words` words of `text`, keeping its own whitespace (newlines of code, JSON)."""
    if words <= 0:
        return ""
    ends = [m.end() for m in itertools.islice(_WORD.finditer(text), words)]
    return text[: ends[-1]] if ends else ""


def make_prompt(size: int, prefix: str, counter: TokenCounter | None = None, kind: str = "mixed") -> str:
    """A prompt of `size` words (or, with `counter`, at most `size` tokens), starting with `prefix`."""
    if size < 1:
        raise ValueError("a prompt needs at least one word")
    head = prefix.replace(" ", "-")
    tail = _ASK_TEXT if size > len(_ASK) + 1 else ""

    def build(n_body: int) -> str:
        return "\n".join(p for p in (head, _cut(text, n_body), tail) if p)

    if counter is None:
        n_body = max(size - 1 - (len(_ASK) if tail else 0), 0)
        text = _body(prefix, n_body, kind)
        return build(n_body)
    # tokens: the largest body whose whole prompt stays within `size` tokens (binary search)
    text = _body(prefix, size, kind)  # every word is at least one token: `size` words are enough
    lo, hi = 0, len(text.split())
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if counter.count(build(mid)) <= size:
            lo = mid
        else:
            hi = mid - 1
    return build(lo)
