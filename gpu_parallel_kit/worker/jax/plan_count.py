"""What a plan search needs of the user's model, counted in a short child on JAX: one sample's
training step (`abstract_count.count_abstract`, no weight allocated) and the model's structure,
its repeated blocks, width and heads, read off the model where it says them.

keras-hub backbones say them (`num_layers`, `hidden_dim`, `num_heads` or `num_query_heads`, and
`transformer_layers`; `num_key_value_heads` and `vocabulary_size` where they have them);
another model's blocks are its attention layers, found by their `num_heads`, when it has
several. What is not found is left out, for the caller to ask for.

A model without Transformer blocks (an MLP, a CNN, a keras.applications network) is counted
layer by layer too: each layer call's forward FLOPs and bytes compiled alone, and its weights'
shapes and activation sizes as the sharding rules read them (`worker/layers.py`), the card a
plan of any model is made of; its step is counted at two batches, to tell what grows with the
batch from what a step costs whatever its batch.

A model whose config says its blocks (`num_layers`: a keras-hub backbone, or a task on one) is
counted by depth (`depth_scaling.count_by_depth`): at one and two blocks, the figures read at its
own depth off the line through them, seconds where the whole model takes minutes.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..quiet_start import native_stderr_filtered
from ..work_count import answer
from .keras_internals import sublayers

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    import keras

    from ...runs.description.sources import CountedSample, ModelSource


def count_for_plans(
    source: ModelSource,
    sample: CountedSample,
    precision: str,
    optimizer: str | None,
    sender: Connection,
) -> None:
    """The child's entry: send ("phase", text) while it works, then (True, the count) or
    (False, one sentence). `sample` is a `CountedSample`: its inputs and labels as `(shape,
    dtype)` per sample, as `count_abstract` takes them, checked against the model first
    (`worker/sample_checks.py`), and the loss an uncompiled model trains with."""

    def count() -> dict[str, Any]:
        from ..compiling import load_model
        from ..depth_scaled_model import depth_of
        from ..sample_checks import check_sample
        from .abstract_count import count_abstract

        built: list[keras.Model] = []

        def build() -> keras.Model:
            model = load_model(source)
            check_sample(model, sample)
            built.append(model)
            return model

        by_depth = _by_depth(source, sample, precision, optimizer, sender)
        if by_depth is not None:
            return by_depth

        def count_at(batch: int) -> dict[str, Any]:
            return count_abstract(
                build,
                sample.inputs,
                batch,
                precision=precision,
                optimizer=optimizer,
                targets=sample.labels,
                loss=_loss(source, sample),
            )

        sender.send(("phase", "tracing and compiling one step"))
        counted = count_at(1)
        kept = counted.pop("activations")
        traced = built[-1]  # the model whose layers the trace names
        said = structure(traced)
        found = {
            **counted,
            "kept_bytes": kept["kept_bytes"],
            "scores_bytes": kept["scores_bytes"],
            "by_layer": kept["by_layer"],
            "kept_by_path": kept.get("by_path", {}),
            "structure": said,
            "depth": depth_of(traced),  # what a plan run here may rebuild; None: kept as is
        }
        if not said:
            sender.send(("phase", "counting each layer"))
            twice = count_at(2)
            found.update(_by_layer(source, sample, counted, twice, traced, found["by_layer"]))
        return found

    # keras-hub imports TensorFlow: its start-up chatter stays out of the notebook's stderr.
    with native_stderr_filtered():
        answer(sender, count)


def _by_depth(
    source: ModelSource,
    sample: CountedSample,
    precision: str,
    optimizer: str | None,
    sender: Connection,
) -> dict[str, Any] | None:
    """The count of a model whose config says its blocks, by depth; None for another model, or
    one too shallow to gain (the model is built once, its weights deferred, to read it)."""
    import keras

    from ..compiling import load_model
    from ..depth_scaled_model import depth_of, with_blocks
    from ..sample_checks import check_sample
    from .depth_scaling import DEPTHS, count_by_depth

    try:
        with keras.StatelessScope(initialize_variables=False):
            model = load_model(source)
            blocks, said = depth_of(model), structure(model)
    except Exception:  # a builder that compiles, say: the whole model is counted instead
        return None
    check_sample(model, sample)
    if blocks is None or blocks <= max(DEPTHS) or not said:
        return None
    sender.send(("phase", f"tracing and compiling the step at {DEPTHS[0]} and {DEPTHS[1]} blocks"))
    counted = count_by_depth(
        lambda depth: with_blocks(model, depth),
        sample.inputs,
        1,
        blocks,
        precision=precision,
        optimizer=optimizer,
        targets=sample.labels,
        loss=_loss(source, sample),
    )
    kept, per_block = counted.pop("activations"), counted["per_block"]["kept_bytes"]
    return {
        **counted,
        "kept_bytes": kept["kept_bytes"],
        "scores_bytes": kept["scores_bytes"],
        "by_layer": dict.fromkeys(said.get("block_names") or [], per_block),
        "kept_by_path": kept.get("by_path", {}),
        "structure": said,
        "depth": blocks,
    }


def _by_layer(
    source: ModelSource,
    sample: CountedSample,
    once: dict[str, Any],
    twice: dict[str, Any],
    counted: keras.Model,
    kept: dict[str, float],
) -> dict[str, Any]:
    """What a card made of the model's own layers needs: the step at one and two samples
    ("steps", as `analysis/cost_model/counted_work.from_counts` reads them), each layer call's
    forward work ("layers"), the layers as the sharding rules read them ("layer_infos") and
    `kept`, what the `counted` model's layers keep, under this build's names ("by_layer"). The
    model is built again with its weights, which a model without Transformer blocks can
    afford; Keras names its layers anew, in the same order."""
    import dataclasses

    from ..compiling import load_model
    from ..layers import read_layers
    from .work_count import layer_counts

    model = load_model(source)
    names = dict(
        zip(
            (layer.name for layer in every_layer(counted)),
            (layer.name for layer in every_layer(model)),
            strict=False,
        )
    )
    zeros = _zeros(sample.inputs)
    model(zeros, training=False)  # built, as a subclassed model builds on its first call
    steps = [
        {
            "batch": step["batch"],
            "flops": step["flops"],
            "bytes": step.get("bytes", 0.0),
            "kernels": step.get("kernels", 0),
        }
        for step in (once, twice)
    ]
    return {
        "steps": steps,
        "by_layer": {names.get(name, name): bytes_ for name, bytes_ in kept.items()},
        "layers": layer_counts(model, 1),
        "layer_infos": [dataclasses.asdict(info) for info in read_layers(model, zeros)],
    }


def _zeros(spec: Any) -> Any:
    """One sample of zeros, batch axis included, for a `(shape, dtype)` spec or a dict or list
    of them."""
    import numpy as np

    if isinstance(spec, dict):
        return {k: _zeros(v) for k, v in spec.items()}
    if isinstance(spec, list):
        return [_zeros(v) for v in spec]
    shape, dtype = spec
    return np.zeros((1, *shape), dtype)


def _loss(source: ModelSource, sample: CountedSample) -> str | keras.losses.Loss:
    """The loss an uncompiled model is counted with: the experiment's, else a built-in model's
    own (as its runs compile it), else a classifier's for labels that are a class index, else a
    regression's."""
    from ..builtin_models import default_compile_args
    from ..compiling import resolved

    if sample.loss is not None:
        return resolved(sample.loss)
    if source.kind == "builtin":
        return default_compile_args()["loss"]
    if _class_index(sample.labels):
        return "sparse_categorical_crossentropy"
    return "mean_squared_error"


def _class_index(labels: object) -> bool:
    """Whether the labels are one integer a sample, a class index (`np.int32(0)`)."""
    import numpy as np

    if not isinstance(labels, tuple) or len(labels) != 2:
        return False
    shape, dtype = labels
    return tuple(shape) in ((), (1,)) and np.issubdtype(np.dtype(dtype), np.integer)


def structure(model: keras.Model) -> dict[str, Any]:
    """The blocks a pipeline cuts between, the width and the heads: "blocks", "hidden",
    "heads", "block_names" (the layers whose activations are a block's), "found_in", and
    where a backbone says them "kv_heads" and "vocabulary"."""
    layers = every_layer(model)
    for layer in layers:
        heads = getattr(layer, "num_heads", None) or getattr(layer, "num_query_heads", None)
        blocks, hidden = getattr(layer, "num_layers", None), getattr(layer, "hidden_dim", None)
        if all(isinstance(v, int) for v in (heads, blocks, hidden)):
            names = [b.name for b in getattr(layer, "transformer_layers", [])]
            said = {
                "blocks": blocks,
                "hidden": hidden,
                "heads": heads,
                "block_names": names,
                "found_in": type(layer).__name__,
            }
            # Grouped-query attention's K and V heads, and the embedding's tokens, where said.
            for key, name in (
                ("kv_heads", "num_key_value_heads"),
                ("vocabulary", "vocabulary_size"),
            ):
                if isinstance(getattr(layer, name, None), int):
                    said[key] = getattr(layer, name)
            return said
    attention = [
        layer
        for layer in layers
        if isinstance(getattr(layer, "num_heads", None), int) and hasattr(layer, "key_dim")
    ]
    if len(attention) < 2:
        return {}
    first = attention[0]
    return {
        "blocks": len(attention),
        "hidden": int(first.num_heads * first.key_dim),
        "heads": int(first.num_heads),
        "block_names": _repeated_names(layers, len(attention)),
        "found_in": f"{len(attention)} {type(first).__name__} layers",
    }


def every_layer(model: keras.layers.Layer) -> list[keras.layers.Layer]:
    """The model and every layer inside it, depth first."""
    found, stack = [], [model]
    while stack:
        layer = stack.pop(0)
        found.append(layer)
        stack[:0] = sublayers(layer)
    return found


def _repeated_names(layers: list[keras.layers.Layer], count: int) -> list[str]:
    """Names of `count` layers numbered alike ("block_0" … "block_11"): the blocks, when the
    model wraps each in a layer of its own; [] when it does not."""
    groups: dict[str, list[str]] = {}
    for layer in layers:
        match = re.fullmatch(r"(.*)_\d+", layer.name)
        if match:
            groups.setdefault(match.group(1), []).append(layer.name)
    named = [names for names in groups.values() if len(names) == count]
    return named[0] if len(named) == 1 else []
