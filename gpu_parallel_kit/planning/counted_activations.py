"""The activations the plan search's card counts for a run, beside those the run measured.

A run given a long-sequence option (`context=`, `sequence_parallel=`, `checkpointing=`, on JAX)
measures the activations one device keeps from the forward for the backward
(`extra["sequence_split"]["kept_activation_bytes"]`). Beside them its row gets
`counted_activation_bytes`: what the card of the same model counts for the same plan at the
size run, in float32 with attention as written, as the runs train. The card is counted once, as
`gpk.search` counts it, and kept in the cache folder; where it cannot be counted, the row says
why in `counted_activation_reason`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..analysis.cost_model.model_card import AS_WRITTEN, ModelCard
from ..analysis.cost_model.parallel_plan import NO_PIPELINE, Plan
from ..analysis.cost_model.parallel_plan_memory import memory
from ..errors import GpkError
from ..strategies import strategy_record
from ..strategies.long_sequences import SequenceSplit
from ..strategies.plan_axes import DATA, STAGES, TENSOR, plan_shape

if TYPE_CHECKING:
    from ..runs.description.run_spec import RunSpec
    from ..runs.results.run_result import RunResult

SPLIT = "sequence_split"  # the row's `extra` entry the long-sequence options fill


def run_as_plan(spec: RunSpec) -> Plan:
    """The plan search's plan of a run: its axes, micro-batches and long-sequence options (the
    context axis taken out of the data axis it lies in)."""
    record = strategy_record(spec.strategy)
    sizes = plan_shape(record.plan_axis, spec.replicas, spec.result_identity()["mesh"])
    split = SequenceSplit.of(spec)
    replicas = max(sizes[DATA] // split.context, 1)
    micro_batches = int(spec.micro_batches) if isinstance(spec.micro_batches, int) else 1
    pipelined = sizes[STAGES] > 1
    return Plan(
        data=replicas,
        tensor=sizes[TENSOR],
        stages=sizes[STAGES],
        sharding="none",
        micro_batch_size=max(spec.global_batch // replicas // micro_batches, 1),
        micro_batches=micro_batches if pipelined else 1,
        schedule=spec.schedule if pipelined and spec.schedule else NO_PIPELINE,
        virtual_stages=1,
        checkpointing=split.checkpointing.value,
        attention=AS_WRITTEN,
        sequence_parallel=split.sequence_parallel,
        context=split.context,
    )


def with_counted_activations(
    results: Sequence[RunResult],
    specs: Sequence[RunSpec],
    card: Callable[[], ModelCard],
) -> list[RunResult]:
    """`results` with the card's count beside each measured row's kept activations; `specs`
    are the runs' own (a comparison's row is matched to its run by what it ran), and `card`
    counts the model (called once, on the first row that needs it)."""
    by_run = {_ran(s.result_identity(), _options(SequenceSplit.of(s))): s for s in specs}
    found: list[ModelCard | str] = []

    def counted() -> ModelCard | str:
        if not found:
            try:
                found.append(card())
            except GpkError as error:
                found.append(str(error))
        return found[0]

    rows = []
    for result in results:
        split = result.extra.get(SPLIT)
        spec = by_run.get(_ran(vars(result), split)) if split else None
        if spec is None or not result.ok:
            rows.append(result)
            continue
        model = counted()
        if isinstance(model, str):
            split = {**split, "counted_activation_reason": model}
        else:
            plan = run_as_plan(spec)
            split = {**split, "counted_activation_bytes": int(memory(model, plan).activations)}
        rows.append(dataclasses.replace(result, extra={**result.extra, SPLIT: split}))
    return rows


def _options(split: SequenceSplit) -> dict[str, object]:
    return {
        "context": split.context,
        "sequence_parallel": split.sequence_parallel,
        "checkpointing": split.checkpointing.value,
    }


def _ran(identity: dict[str, object], split: dict[str, object]) -> tuple[object, ...]:
    """What a run ran, as its row and its spec both say it."""
    shape = tuple(identity.get(k) for k in ("strategy", "devices", "workers", "mesh", "schedule"))
    return shape + tuple(split.get(k) for k in ("context", "sequence_parallel", "checkpointing"))
