"""`gpk.search`: which data × fsdp × tensor × pipeline plan of a model fits a cluster and is
fastest, and why.

The model's step is counted once for one sample (`step_count.py`, kept for later searches), made
a card (`analysis/cost_model/model_card.py`), every plan of it sized and timed on the cluster
(`analysis/cost_model/parallel_plan_ranking.py`), the leading plans' pipelines replayed
(`analysis/cost_model/bubble_refinement.py`), and the rows handed back as `Plans`.
"""

from __future__ import annotations

import threading
from typing import Any

from ..analysis.cost_model.bubble_refinement import refine
from ..analysis.cost_model.gpu_cluster import GPUCluster
from ..analysis.cost_model.hardware_presets import Interconnect
from ..analysis.cost_model.layer_rows import find_blocks
from ..analysis.cost_model.model_card import ModelCard, model_card
from ..analysis.cost_model.parallel_plan import attention_of
from ..analysis.cost_model.parallel_plan_memory import RESERVE
from ..analysis.cost_model.parallel_plan_ranking import rank
from ..analysis.cost_model.training_precision import state_bytes, training_precision
from ..errors import GpkError, whole_number
from ..runs.description.sources import CountedSample, ModelSource, model_source
from .plans import Plans
from .sample_inputs import experiment_sample, sample_spec, sequence_of
from .step_count import counted_step


def search(
    model: Any,
    inputs: Any,
    gpus: GPUCluster,
    global_batch: int,
    precision: str = "bf16",
    optimizer: str = "adam",
    *,
    blocks: int | None = None,
    hidden: int | None = None,
    heads: int | None = None,
    sequence: int | None = None,
    labels: Any = None,
    reserve: float = RESERVE,
    attention: str | None = None,
    progress: bool = True,
    cancel: threading.Event | None = None,
) -> Plans:
    """Rank every plan of `model` on the cluster `gpus` at `global_batch` samples a step.

    The step is counted for one sample without allocating the model's weights (minutes for a
    model of hundreds of billions of parameters, shown as it goes, and kept in the user's cache
    folder so the next search of the same model, on any cluster or batch, is instant).

    Args:
        model: a function that builds the Keras model (as `Experiment` takes), a built-in name
            or a `.keras` file.
        inputs: ONE sample of the model's inputs, without the batch axis: an array, or a dict
            or list of arrays, e.g. `{"token_ids": np.zeros(2048, "int32"), ...}`.
        gpus: the cluster, a `gpk.GPUCluster`.
        global_batch: samples per training step, over the whole cluster.
        precision: "bf16", "fp16" or "mixed" (16-bit weights and gradients, fp32 master weights
            and optimizer state), or "fp32".
        optimizer: adam, adamw, sgd, momentum, ... (what the memory counts of its state).
        blocks, hidden, heads, sequence: the model's repeated blocks, width, attention heads
            and tokens per sample, where the model does not say them (a keras-hub backbone
            does).
        labels: ONE sample of the labels, as `inputs`, where the loss takes other than the
            model's output shape: a class index, `np.int32(0)`, for
            `sparse_categorical_crossentropy`. Default: shaped like the model's output.
        reserve: the share of each GPU's memory kept free for the framework.
        attention: "flash" (a fused kernel: the attention's s² residuals never kept, its QKᵀ
            recomputed in the backward) or "as-written"; None: "flash" where the cluster's GPU
            has a fused kernel.
        progress: show the count's progress.
        cancel: an event that stops the count (its child process ended) and raises
            `SearchCancelled`.

    Returns:
        `Plans`: `.table`, `.best`, `.top(n)`, `.explain()`, `.plot()`.

    Example: `gpk.search(model=build_gpt, inputs={"token_ids": np.zeros(2048, "int32"),
    "padding_mask": np.ones(2048, "int32")}, gpus=gpk.GPUCluster("a100", nodes=16),
    global_batch=512)`.
    """
    sample = CountedSample(
        sample_spec(inputs), None if labels is None else sample_spec(labels, "labels")
    )
    source = model_source(model)
    builder = model if callable(model) else None
    structure = dict(blocks=blocks, hidden=hidden, heads=heads, sequence=sequence)
    return _search(
        source,
        builder,
        sample,
        gpus,
        global_batch,
        precision,
        optimizer,
        structure,
        reserve,
        progress,
        attention=attention,
        cancel=cancel,
    )


def search_experiment(
    experiment: Any, gpus: GPUCluster, global_batch: int, **options: Any
) -> Plans:
    """`search` on an experiment's own model and one sample of its data, labels included, with
    its loss; `options` are `search`'s keywords (`precision`, `optimizer`, `blocks`, ...)."""
    sample = experiment_sample(experiment.data, experiment.training.loss)
    structure = {k: options.pop(k, None) for k in ("blocks", "hidden", "heads", "sequence")}
    precision = options.pop("precision", "bf16")
    optimizer = options.pop("optimizer", "adam")
    reserve = options.pop("reserve", RESERVE)
    return _search(
        experiment.model,
        None,
        sample,
        gpus,
        global_batch,
        precision,
        optimizer,
        structure,
        reserve,
        options.pop("progress", True),
        attention=options.pop("attention", None),
        cancel=options.pop("cancel", None),
        unknown=options,
    )


def experiment_card(experiment: Any, precision: str = "fp32", optimizer: str = "adam") -> ModelCard:
    """The card `search_experiment` counts for an experiment's own model (its count kept in the
    cache folder), without ranking any plan: what a run's row sets its counted figures from."""
    sample = experiment_sample(experiment.data, experiment.training.loss)
    record = training_precision(precision)
    count = counted_step(experiment.model, None, sample, record.policy, optimizer, False)
    return model_card(
        count, record.name, optimizer, experiment.model.name, sequence=sequence_of(sample.inputs)
    )


def plans_of(
    card: ModelCard,
    gpus: GPUCluster,
    global_batch: int,
    reserve: float = RESERVE,
    name: str = "the model",
    note: str = "",
    attention: str | None = None,
) -> Plans:
    """Every plan of a counted `card` on `gpus`, ranked, the leading pipelines replayed;
    `attention` is `rank`'s."""
    rows = rank(card, gpus, global_batch, reserve=reserve, attention=attention)
    replayed = refine(rows, card, lambda row: _stage_link(gpus, row))
    room = gpus.device.memory_bytes * (1 - reserve)
    said = f"the {replayed} leading pipelined plans' bubbles simulated, the others' closed form"
    note = "; ".join(t for t in (note, said if replayed else "") if t)
    return Plans(rows, card, gpus, global_batch, room, name=name, note=note)


def _search(
    source: ModelSource,
    builder: Any,
    sample: CountedSample,
    gpus: Any,
    global_batch: int,
    precision: str,
    optimizer: str,
    structure: dict[str, Any],
    reserve: float,
    progress: bool,
    attention: str | None = None,
    unknown: dict[str, Any] | None = None,
    cancel: threading.Event | None = None,
) -> Plans:
    if unknown:
        raise GpkError(
            f"search() got {', '.join(repr(k) for k in unknown)}, which it does not take; use "
            "precision=, optimizer=, blocks=, hidden=, heads=, sequence=, reserve=, attention= or "
            "progress="
        )
    if not isinstance(gpus, GPUCluster):
        raise GpkError(
            f"gpus={gpus!r} is not a cluster; give gpk.GPUCluster(device='a100', nodes=16, "
            "per_node=8, inside='nvlink3', between='net400g')"
        )
    whole_number(global_batch, "global_batch")
    record = training_precision(precision)
    state_bytes(optimizer, precision)
    attention_of(gpus, attention)  # one sentence for an unknown name, before the count
    if not 0 <= reserve < 1:
        raise GpkError(f"reserve={reserve} must lie in [0, 1); e.g. 0.1 keeps a tenth free")
    for key, value in structure.items():
        if value is not None:
            whole_number(value, key)
    count = counted_step(source, builder, sample, record.policy, optimizer, progress, cancel)
    sequence = structure.get("sequence") or sequence_of(sample.inputs)
    card = model_card(
        count, record.name, optimizer, source.name, **{**structure, "sequence": sequence}
    )
    how = "kept from an earlier count" if count.get("cached") else "counted now"
    if count.get("depths"):  # a keras-hub backbone: `worker/jax/plan_count.py` counts by depth
        low, high = count["depths"]
        how += f" at {low} and {high} blocks and extrapolated to {card.layers}"
    found_in = (count.get("structure") or {}).get("found_in")
    said = f"read off its {found_in}" if found_in and structure.get("blocks") is None else "given"
    note = (
        f"{source.name}: {card.parameters:,.0f} parameters, {card.layers} blocks ({said}), one "
        f"sample's step {how} under {record.policy}"
    )
    if card.rows:
        blocks = find_blocks(tuple(row.kind for row in card.rows))
        runs = "one run" if len(blocks) == 1 else f"{len(blocks)} runs"
        repeated = f", {runs} of repeated layers" if blocks else ""
        divisors = [t for t in range(2, gpus.gpus + 1) if gpus.gpus % t == 0]
        tensor = (
            "the sharding rules split its dense and convolution pairs for tensor plans"
            if any(card.tensor_splits(t) for t in divisors)
            else "the sharding rules split none of its layers, so no tensor plans"
        )
        note = (
            f"{source.name}: {card.parameters:,.0f} parameters in {card.layers} layers"
            f"{repeated}, each layer's work counted ({how}) under {record.policy}; {tensor}"
        )
    return plans_of(
        card, gpus, global_batch, reserve, name=source.name, note=note, attention=attention
    )


def _stage_link(cluster: GPUCluster, row: dict[str, Any]) -> Interconnect | None:
    replicas = row["data"] * row["context"]  # the context axis sits inside the data axis
    return cluster.links(data=replicas, tensor=row["tensor"], stages=row["stages"])["stages"]
