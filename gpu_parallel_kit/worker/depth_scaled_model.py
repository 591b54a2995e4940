"""A keras-hub model rebuilt with fewer (or more) blocks: the same block, `num_layers` changed.

A keras-hub backbone says its depth in its config (`num_layers`), and a task built on one (a
`CausalLM`) or a functional model that calls one holds its backbone's config; `from_config` with
another `num_layers` then builds the same model at another depth. The plan search counts a deep
backbone from two shallow ones (`jax/depth_scaling.py`), and a plan's shape runs here on a
shallow copy (`Experiment.run_plan`), its depth and heads read first (`model_depth`).
"""

from __future__ import annotations

import copy
from typing import Any

from ..errors import GpkError
from ..runs.description.sources import ModelSource
from .quiet_start import native_stderr_filtered
from .work_count import answer

BLOCKS_KEY = "num_layers"  # how a keras-hub backbone's config names its blocks


def depth_of(model: Any) -> int | None:
    """The blocks `model`'s config says (its own, or its backbone's); None when it says none."""
    found = _blocks_config(model.get_config())
    return None if found is None else int(found[BLOCKS_KEY])


def heads_of(model: Any) -> int | None:
    """The attention heads beside the blocks in `model`'s config; None when it says none."""
    found = _blocks_config(model.get_config()) or {}
    heads = found.get("num_heads", found.get("num_query_heads"))
    return heads if isinstance(heads, int) else None


def model_depth(source: ModelSource, sender: Any) -> None:
    """A child's entry: send (True, {"depth": blocks or None, "heads": heads or None}) of the
    experiment's model, built with its weights deferred where its builder allows."""

    def read() -> dict[str, Any]:
        import keras

        from .compiling import load_model

        # keras-hub imports TensorFlow: its start-up chatter stays out of the notebook.
        with native_stderr_filtered():
            try:
                with keras.StatelessScope(initialize_variables=False):
                    model = load_model(source)
            except Exception:  # a builder that makes an optimizer, say: built as it is
                model = load_model(source)
        return {"depth": depth_of(model), "heads": heads_of(model)}

    answer(sender, read)


def with_blocks(model: Any, blocks: int) -> Any:
    """`model` built again from its config with `blocks` blocks, compiled as it was."""
    config = plain_copy(model.get_config())
    found = _blocks_config(config)
    if found is None:
        raise GpkError(
            f"{type(model).__name__} does not say its blocks in its config (num_layers); only a "
            "keras-hub backbone, or a task built on one, can be rebuilt with fewer"
        )
    found[BLOCKS_KEY] = blocks
    rebuilt = type(model).from_config(config)
    if getattr(model, "compiled", False):
        rebuilt.compile_from_config(model.get_compile_config())
    return rebuilt


def load_with_blocks(source: ModelSource, blocks: int) -> Any:
    """The experiment's model, loaded and rebuilt with `blocks` blocks."""
    from .compiling import load_model

    return with_blocks(load_model(source), blocks)


def plain_copy(config: Any) -> Any:
    """A deep copy of a config, its lists and dicts plain ones.

    Keras tracks a layer's list and dict attributes (keras-hub's Qwen-MoE `mlp_only_layers`,
    Gemma 4's and Qwen3.5's `layer_types`), and a config holds them as they are: a deep copy
    of a tracked list copies the layer it tracks, weights and all, allocating a model built with
    its weights deferred.
    """
    if isinstance(config, dict):
        return {key: plain_copy(value) for key, value in config.items()}
    if isinstance(config, list | tuple):
        copied = [plain_copy(value) for value in config]
        return tuple(copied) if isinstance(config, tuple) else copied
    return copy.deepcopy(config)


def _blocks_config(config: Any) -> dict[str, Any] | None:
    """The first dict in `config` that holds `num_layers`: the config itself, a task's backbone,
    or a backbone layer of a functional model that wraps one."""
    if isinstance(config, dict):
        if isinstance(config.get(BLOCKS_KEY), int):
            return config
        parts: Any = config.values()
    elif isinstance(config, list | tuple):
        parts = config
    else:
        return None
    return next((found for part in parts if (found := _blocks_config(part)) is not None), None)
