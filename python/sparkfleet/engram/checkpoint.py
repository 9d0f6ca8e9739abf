"""The engram facts a checkpoint states itself, in its config.json, and how a recipe may only confirm them.

Why: the TP4 recipe used to carry the two tables as hand-typed numbers ("which table is which
layer is an assumption too") while DeepSeek-V4.1-Flash's config.json declares them under
`text_config`: `engram_layer_ids` and `engram_num_embeddings` (paired in order), `engram_n_heads`,
`engram_head_dim`, `engram_max_ngram_size`. The safetensors headers then give each table's row
count and row width. A recipe value is a confirmation: one that contradicts the checkpoint is
refused naming both, never silently preferred.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..base.errors import SourceError

KEYS = (
    "engram_layer_ids",
    "engram_num_embeddings",
    "engram_n_heads",
    "engram_head_dim",
    "engram_max_ngram_size",
)


@dataclass(frozen=True)
class CheckpointEngram:
    """config.json's engram block (`text_config` or the top level)."""

    where: str  # "<config.json path>: text_config" — named in every refusal
    layers: tuple[int, ...]
    rows: dict[int, int]  # layer -> rows (engram_num_embeddings, paired with engram_layer_ids)
    n_heads: int | None
    head_dim: int | None
    max_ngram_size: int | None

    @property
    def rows_per_token(self) -> int | None:
        """Rows one token looks up per engram layer: one per head for each n-gram order 2..max
        ((max_ngram_size - 1) x n_heads; 24 for DeepSeek-V4.1-Flash)."""
        if self.n_heads is None or self.max_ngram_size is None:
            return None
        return (self.max_ngram_size - 1) * self.n_heads


def _int(doc: dict, key: str, where: str) -> int | None:
    v = doc.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise SourceError(f"{where}.{key}: {v!r} is not a positive integer")
    return v


def from_config(doc: object, where: str) -> CheckpointEngram | None:
    """The engram block of a parsed config.json, or None when the checkpoint declares none."""
    if not isinstance(doc, dict):
        return None
    block, at = doc, where
    if isinstance(doc.get("text_config"), dict) and "engram_layer_ids" in doc["text_config"]:
        block, at = doc["text_config"], f"{where}: text_config"
    if "engram_layer_ids" not in block:
        return None
    layers, counts = block.get("engram_layer_ids"), block.get("engram_num_embeddings")
    if not isinstance(layers, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) for x in layers
    ):
        raise SourceError(f"{at}.engram_layer_ids: {layers!r} is not a list of layer numbers")
    rows: dict[int, int] = {}
    if counts is not None:
        if not isinstance(counts, list) or len(counts) != len(layers):
            raise SourceError(
                f"{at}.engram_num_embeddings: {counts!r} does not pair with engram_layer_ids {layers!r}",
                hint="one row count per engram layer, in the same order",
            )
        rows = {int(layer): int(n) for layer, n in zip(layers, counts, strict=True)}
    return CheckpointEngram(
        where=at,
        layers=tuple(int(x) for x in layers),
        rows=rows,
        n_heads=_int(block, "engram_n_heads", at),
        head_dim=_int(block, "engram_head_dim", at),
        max_ngram_size=_int(block, "engram_max_ngram_size", at),
    )


def reconcile_layers(
    ckpt: CheckpointEngram, recipe_layers: tuple[int, ...], recipe_where: str
) -> tuple[int, ...]:
    """The layers to pack: the checkpoint's. A recipe `layers` must name the same set (the runtime
    needs every table), else it is refused naming both."""
    if recipe_layers and tuple(sorted(recipe_layers)) != tuple(sorted(ckpt.layers)):
        raise SourceError(
            f"{recipe_where}.layers = {list(recipe_layers)} contradicts {ckpt.where}.engram_layer_ids = "
            f"{list(ckpt.layers)}",
            hint=f"drop `layers` from {recipe_where} (the checkpoint states them) or pin another revision",
        )
    return ckpt.layers


def reconcile_rows(
    ckpt: CheckpointEngram, layer: int, recipe_rows: int | None, recipe_where: str
) -> int | None:
    """The checkpoint's row count of `layer` (None when it states none); a recipe value must agree."""
    have = ckpt.rows.get(layer)
    if have is not None and recipe_rows is not None and recipe_rows != have:
        raise SourceError(
            f"{recipe_where}.rows.{layer} = {recipe_rows} contradicts {ckpt.where}.engram_num_embeddings "
            f"for layer {layer} = {have}",
            hint=f"drop rows from {recipe_where} (the checkpoint states them) or pin another revision",
        )
    return have


def reconcile_rows_per_token(
    ckpt: CheckpointEngram | None, recipe_value: int | None, recipe_where: str
) -> int | None:
    """Engram rows a token reads per layer: the checkpoint's (max_ngram_size - 1) x n_heads, a
    recipe value only confirming it; the recipe's alone when the checkpoint states neither."""
    derived = ckpt.rows_per_token if ckpt else None
    if derived is not None and recipe_value is not None and recipe_value != derived:
        raise SourceError(
            f"{recipe_where}.engram_rows_per_token = {recipe_value} contradicts {ckpt.where}: "  # type: ignore[union-attr]
            f"(engram_max_ngram_size - 1) x engram_n_heads = {derived}",
            hint=f"drop engram_rows_per_token from {recipe_where} (the checkpoint states it)",
        )
    return derived if derived is not None else recipe_value
