"""One training step of a keras-hub backbone at a released model's shape, counted by depth.

`hub_count` builds `keras_hub.models.<backbone>(**config)` with its language-model head (the
logits read through the token embedding, reversed: tied or not, as the backbone's config says)
at two small depths at full width, counts one sample's training step at each with
`depth_scaling.count_by_depth` (no weight allocated) and reads the step at the model's own depth
off the line through them, as `depth_scaling.gpt_card` does for a GPT. The structure the search
reads of a model (`plan_count.structure`: width, heads, KV heads, vocabulary) and, for a mixture
of experts, its expert banks (`worker/expert_banks.expert_structure`) are read off the same two
small models, their weights deferred, and carried to the model's depth the same way: the count
is what `plan_count` answers a search, and its card the search's own
(`analysis/cost_model/model_card.model_card`; for a mixture of experts: its experts, top-k and
routed FLOPs), made by the caller. See `benchmarks/count_h100_cards.py`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ...errors import GpkError, whole_number
from .depth_scaling import DEPTHS, INPUTS, count_by_depth

# What a bank reading adds each block: carried to the model's depth along the line.
EXPERT_LINEAR = ("expert_parameters", "expert_outputs")


def hub_builder(backbone: str, config: dict[str, Any], sequence: int) -> Callable[[int], Any]:
    """`build(depth)`: keras-hub's `backbone` built from `config` with `depth` blocks and its
    language-model head, the logits read through its token embedding reversed (the backbone's
    own output embedding where its config unties it)."""

    def build(depth: int) -> Any:
        import keras
        import keras_hub

        made = getattr(keras_hub.models, backbone)(**{**config, "num_layers": depth})
        inputs = {name: keras.Input((sequence,), dtype="int32", name=name) for name in INPUTS}
        logits = made.token_embedding(made(inputs), reverse=True)
        return keras.Model(inputs, logits)

    return build


def read_structure(build: Callable[[int], Any], depths: tuple[int, int], layers: int) -> dict:
    """The structure and experts the search reads of the model, at `layers` blocks: read off
    `build(depth)` at both `depths`, weights deferred, what grows with the blocks carried along
    the line through them (each block of a keras-hub stack is the same)."""
    import keras

    from ..expert_banks import expert_structure
    from .plan_count import structure

    read = []
    for depth in depths:
        with keras.StatelessScope(initialize_variables=False):
            model = build(depth)
            read.append((structure(model), expert_structure(model)))
    (_, low), (said, high) = read
    said = {**said, "blocks": layers}
    experts = dict(high)
    if high:
        d_low, d_high = depths
        for key in EXPERT_LINEAR:
            slope = (high[key] - low[key]) / (d_high - d_low)
            experts[key] = float(high[key] + slope * (layers - d_high))
    return {"structure": said, "experts": experts}


def hub_count(
    backbone: str,
    config: dict[str, Any],
    sequence: int,
    policy: str = "mixed_bfloat16",
    depths: tuple[int, int] = DEPTHS,
) -> dict[str, Any]:
    """The count of keras-hub's `backbone` at `config` (its blocks `config["num_layers"]`), one
    sample of `sequence` tokens counted by depth, as `plan_count` answers a search: its card is
    `analysis/cost_model/model_card.model_card(count, "bf16", "adam", name, sequence=...)`.

    The step counted is `gpt_card`'s: the forward and backward of one sequence with a
    cross-entropy loss on the logits, without the optimizer's update.

    Args:
        backbone: the class's name in `keras_hub.models`, e.g. "Llama3Backbone".
        config: the backbone's arguments at the released shape, `num_layers` included.
        sequence: tokens per sample.
        policy: the Keras dtype policy of the count.
        depths: the two depths counted.

    Returns:
        `count_by_depth`'s figures, with "kept_bytes", "scores_bytes" and "kept_by_path" (what
        backpropagation keeps), "structure" and "experts" (`read_structure`), and "timing":
        "count_s" (the two counts' wall time), "read_s" (reading the structure and banks) and
        "seconds" (all of it).
    """
    import keras

    layers = whole_number(config.get("num_layers"), "num_layers")
    whole_number(sequence, "sequence")
    if layers <= max(depths):
        raise GpkError(
            f"{backbone} has {layers} blocks, not more than the depths {depths} counted; count "
            "it whole instead"
        )
    build = hub_builder(backbone, config, sequence)
    started = time.perf_counter()
    count = count_by_depth(
        build,
        {key: ((sequence,), "int32") for key in INPUTS},
        1,
        layers,
        depths,
        precision=policy,
        targets=((sequence,), "int32"),
        optimizer=None,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    counted = time.perf_counter()
    read = read_structure(build, count["depths"], layers)
    kept = count.pop("activations")
    done = time.perf_counter()
    return {
        **count,
        "kept_bytes": kept["kept_bytes"],
        "scores_bytes": kept["scores_bytes"],
        "kept_by_path": kept.get("by_path", {}),
        **read,
        "timing": {
            "count_s": round(count["count_s"], 1),
            "read_s": round(done - counted, 1),
            "seconds": round(done - started, 1),
        },
    }
