"""A deep Transformer counted at full width but few blocks, its figures extrapolated in depth.

Every block of a Transformer is the same, so a training step's FLOPs, bytes, parameters and
kept activations grow linearly with its blocks: what lies outside them (embeddings, the head,
the loss) is the line's intercept, one block its slope. `count_by_depth` counts the step of
`build(depth)` at two small depths with `count_abstract` and reads the figures at the model's
own depth off that line, so a 175 B or 1 T model is counted in the time of two small ones.
`gpt_card` does so for a GPT of keras-hub's `GPT2Backbone` with a language-model head, and
`llama_card` for a Llama of keras-hub's `LlamaBackbone` (gated MLP, rotary positions, RMS
norms, an untied head); each returns the fields of the plan search's `ModelCard`. See
`docs/planning.md`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

from ...errors import GpkError, whole_number
from .abstract_count import count_abstract


class DepthLine(NamedTuple):
    """A figure extrapolated along a line through two depths."""

    value: float  # at the model's own depth
    per_block: float  # the slope: what each block adds


DEPTHS = (1, 2)  # blocks of the two counted models
LINEAR = ("flops", "bytes", "parameters", "kernels")
LINEAR_ACTIVATIONS = ("saved_bytes", "kept_bytes", "scores_bytes")


def count_by_depth(
    build: Callable[[int], Any],
    inputs: Any,
    batch: int,
    layers: int,
    depths: tuple[int, int] = DEPTHS,
    **options: Any,
) -> dict[str, Any]:
    """Count one training step of `build(layers)` from counts of `build(depth)` at two depths.

    Args:
        build: `build(depth)` returns the Keras model with `depth` blocks, all else the same.
        inputs: the model's inputs per sample, as `count_abstract` takes them.
        batch: the samples per step.
        layers: the blocks of the model the figures are for.
        depths: the two depths counted, e.g. (1, 2) or (2, 4).
        **options: `count_abstract`'s other arguments (precision, targets, optimizer, loss).

    Returns:
        A dict: "flops", "bytes", "parameters", "kernels" and "activations" ("saved_bytes",
        "kept_bytes", "scores_bytes", "by_kind") at `layers` blocks; "per_block", the same
        figures for one block (the line's slope); "depths", "layers", "batch", "optimizer",
        "precision", "attention" and "count_s" (the two counts' wall time).
    """
    whole_number(layers, "layers")
    whole_number(batch, "batch")
    if len(depths) != 2 or not all(isinstance(d, int) and d >= 1 for d in depths):
        raise GpkError(f"depths={depths!r} must be two depths of 1 block or more, e.g. (1, 2)")
    low, high = sorted(depths)
    if low == high:
        raise GpkError(f"depths={depths!r} must differ to give a slope; use e.g. (1, 2)")
    started = time.perf_counter()
    counts = [count_abstract(lambda d=d: build(d), inputs, batch, **options) for d in (low, high)]
    elapsed = time.perf_counter() - started
    if counts[0]["parameters"] == counts[1]["parameters"]:
        raise GpkError(
            f"build({low}) and build({high}) have the same {counts[0]['parameters']:,} "
            "parameters; give a builder whose argument is the number of blocks"
        )

    def line(a: float, b: float) -> DepthLine:
        slope = (b - a) / (high - low)
        return DepthLine(a + slope * (layers - low), slope)

    found: dict[str, Any] = {}
    per_block: dict[str, Any] = {}
    for key in LINEAR:
        found[key], per_block[key] = line(counts[0][key], counts[1][key])
    found["parameters"] = round(found["parameters"])
    per_block["parameters"] = round(per_block["parameters"])
    kept = [c["activations"] for c in counts]
    activations: dict[str, Any] = {}
    for key in LINEAR_ACTIVATIONS:
        activations[key], per_block[key] = line(kept[0].get(key, 0), kept[1].get(key, 0))
    for part in ("by_kind", "by_path"):
        names = dict.fromkeys([*kept[1].get(part, {}), *kept[0].get(part, {})])
        activations[part] = {
            name: line(kept[0][part].get(name, 0), kept[1][part].get(name, 0)).value
            for name in names
        }
    return {
        **found,
        "activations": activations,
        "per_block": per_block,
        "depths": (low, high),
        "layers": layers,
        "batch": batch,
        "optimizer": counts[1]["optimizer"],
        "precision": counts[1]["precision"],
        "attention": counts[1]["attention"],
        "count_s": elapsed,
    }


def gpt_builder(
    hidden: int,
    heads: int,
    intermediate: int,
    sequence: int,
    vocabulary: int,
    dropout: float = 0.1,
) -> Callable[[int], Any]:
    """`build(depth)`: keras-hub's `GPT2Backbone` of `depth` blocks with its language-model
    head, the logits read through the token embedding (tied, as GPT-2 and Megatron-LM tie it)."""

    def build(depth: int) -> Any:
        import keras
        import keras_hub

        backbone = keras_hub.models.GPT2Backbone(
            vocabulary_size=vocabulary,
            num_layers=depth,
            num_heads=heads,
            hidden_dim=hidden,
            intermediate_dim=intermediate,
            max_sequence_length=sequence,
            dropout=dropout,
        )
        inputs = {name: keras.Input((sequence,), dtype="int32", name=name) for name in INPUTS}
        logits = backbone.token_embedding(backbone(inputs), reverse=True)
        return keras.Model(inputs, logits)

    return build


INPUTS = ("token_ids", "padding_mask")


def gpt_card(
    layers: int,
    hidden: int,
    heads: int,
    intermediate: int,
    sequence: int,
    vocabulary: int,
    precision: str = "mixed_bfloat16",
    depths: tuple[int, int] = DEPTHS,
) -> dict[str, Any]:
    """A GPT's `ModelCard` fields, counted by depth at one sequence: `ModelCard(**card)`.

    The step counted is the forward and backward of one sequence with a cross-entropy loss on
    the tied logits, without the optimizer's update: `flops_per_sample` is its FLOPs, and
    `activation_bytes` one block's kept activations (the slope) under `precision`.

    Args:
        layers, hidden, heads, intermediate, sequence, vocabulary: a keras-hub GPT-2 style
            config (blocks, width, attention heads, the MLP's width, tokens per sample, tokens).
        precision: the Keras dtype policy of the count.
        depths: the two depths counted.
    """
    import keras

    for value, name in ((hidden, "hidden"), (heads, "heads"), (intermediate, "intermediate")):
        whole_number(value, name)
    for value, name in ((sequence, "sequence"), (vocabulary, "vocabulary")):
        whole_number(value, name)
    if hidden % heads:
        raise GpkError(f"hidden={hidden} is not a multiple of heads={heads}; use one that is")
    build = gpt_builder(hidden, heads, intermediate, sequence, vocabulary)
    count = count_by_depth(
        build,
        {name: ((sequence,), "int32") for name in INPUTS},
        1,
        layers,
        depths,
        precision=precision,
        targets=((sequence,), "int32"),
        optimizer=None,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return {
        "parameters": float(count["parameters"]),
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "sequence": sequence,
        "flops_per_sample": count["flops"],
        "activation_bytes": count["per_block"]["kept_bytes"],
    }


def llama_builder(
    hidden: int,
    heads: int,
    kv_heads: int,
    intermediate: int,
    sequence: int,
    vocabulary: int,
) -> Callable[[int], Any]:
    """`build(depth)`: keras-hub's `LlamaBackbone` of `depth` blocks (a SwiGLU MLP of
    `intermediate`, rotary positions, RMS norms, no dropout) with its language-model head,
    the logits read through its own output embedding (Llama's head is untied)."""

    def build(depth: int) -> Any:
        import keras
        import keras_hub

        backbone = keras_hub.models.LlamaBackbone(
            vocabulary_size=vocabulary,
            num_layers=depth,
            num_query_heads=heads,
            hidden_dim=hidden,
            intermediate_dim=intermediate,
            num_key_value_heads=kv_heads,
            tie_word_embeddings=False,
        )
        inputs = {name: keras.Input((sequence,), dtype="int32", name=name) for name in INPUTS}
        logits = backbone.token_embedding(backbone(inputs), reverse=True)
        return keras.Model(inputs, logits)

    return build


def llama_card(
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    intermediate: int,
    sequence: int,
    vocabulary: int,
    precision: str = "mixed_bfloat16",
    depths: tuple[int, int] = DEPTHS,
) -> dict[str, Any]:
    """A Llama's `ModelCard` fields, counted by depth at one sequence: `ModelCard(**card)`.

    The step counted is `gpt_card`'s: the forward and backward of one sequence with a
    cross-entropy loss on the logits, without the optimizer's update. Beside `gpt_card`'s
    fields it gives `kv_heads` and `attention_scores_bytes`, one block's s² residuals as the
    count found them (Llama runs no dropout on its scores, so fewer than a GPT-2's).

    Args:
        layers, hidden, heads, kv_heads, intermediate, sequence, vocabulary: a keras-hub Llama
            config (blocks, width, query heads, key-value heads, the gated MLP's width, tokens
            per sample, tokens).
        precision: the Keras dtype policy of the count.
        depths: the two depths counted.
    """
    import keras

    for value, name in ((hidden, "hidden"), (heads, "heads"), (kv_heads, "kv_heads")):
        whole_number(value, name)
    for value, name in ((intermediate, "intermediate"), (sequence, "sequence")):
        whole_number(value, name)
    whole_number(vocabulary, "vocabulary")
    if hidden % heads or heads % kv_heads:
        raise GpkError(
            f"hidden={hidden}, heads={heads} and kv_heads={kv_heads} must each divide the one "
            "before; use e.g. 4096, 32 and 8"
        )
    build = llama_builder(hidden, heads, kv_heads, intermediate, sequence, vocabulary)
    count = count_by_depth(
        build,
        {name: ((sequence,), "int32") for name in INPUTS},
        1,
        layers,
        depths,
        precision=precision,
        targets=((sequence,), "int32"),
        optimizer=None,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return {
        "parameters": float(count["parameters"]),
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "kv_heads": kv_heads,
        "sequence": sequence,
        "flops_per_sample": count["flops"],
        "activation_bytes": count["per_block"]["kept_bytes"],
        "attention_scores_bytes": count["per_block"]["scores_bytes"],
    }
