"""The options that train long sequences on JAX: context parallelism, sequence parallelism and
recomputation, taken by `data`, `tensor` and `fsdp` alike.

- `context=c` splits each sample's sequence over c devices of the data axis (the mesh's data
  axis becomes c-way context inside data ÷ c replicas), as Megatron-Core and MaxText place a
  context axis: every activation of the Transformer blocks is split along the sequence, and
  attention sees the whole sequence, its keys and values gathered over the context axis where
  XLA needs them (Llama 3's all-gather).
- `sequence_parallel=True`, with a tensor axis, splits the activations outside the
  tensor-parallel matmuls (the blocks' norms) along the sequence over the model axis, so the
  all-reduces become a reduce-scatter and an all-gather (Korthikanti et al. 2022).
- `checkpointing="selective"` recomputes each attention layer in the backward instead of
  keeping its activations; `"full"` recomputes each whole block, keeping its input alone.

>>> exp.run("data", 4, backend="jax", context=2)
>>> exp.run("tensor", 2, backend="jax", sequence_parallel=True, checkpointing="selective")
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import GpkError
from .option import Option, positive
from .processes import process_share

if TYPE_CHECKING:
    from ..runs.description.run_spec import RunSpec


class Checkpointing(enum.StrEnum):
    """What a run recomputes in the backward instead of keeping from the forward."""

    NONE = "none"
    SELECTIVE = "selective"  # each attention layer
    FULL = "full"  # each Transformer block


# `context` and `checkpointing` default to None, "not given": a run given either (even at its
# plain value, as a comparison of context 1, 2 and 4 gives context=1), or sequence parallelism,
# records what they did and measures the compiled step's temporaries.
CONTEXT = Option(
    "context",
    positive,
    None,
    "devices each sample's sequence is split over, inside the data axis (context parallelism); "
    "default 1; JAX only",
    metavar="C",
    backends=("jax",),
)
SEQUENCE_PARALLEL = Option(
    "sequence_parallel",
    bool,
    False,
    "split the blocks' norms along the sequence over the tensor axis (needs a model axis: "
    "tensor's, or each pipeline stage's mesh); JAX only",
    backends=("jax",),
)
CHECKPOINTING = Option(
    "checkpointing",
    str,
    None,
    "recompute in the backward: 'selective' (each attention layer) or 'full' (each block); "
    "default none; JAX only",
    choices=tuple(c.value for c in Checkpointing),
    backends=("jax",),
)
LONG_SEQUENCE_OPTIONS = (CONTEXT, SEQUENCE_PARALLEL, CHECKPOINTING)


@dataclass(frozen=True)
class SequenceSplit:
    """How a run splits and recomputes a long sequence (see the module)."""

    context: int = 1
    sequence_parallel: bool = False
    checkpointing: Checkpointing = Checkpointing.NONE
    given: bool = False  # whether the run was given any of the options, even at its default

    @property
    def any(self) -> bool:
        """Whether the run does anything beyond the plain strategy."""
        return (self.context, self.sequence_parallel, self.checkpointing) != (
            1,
            False,
            Checkpointing.NONE,
        )

    @classmethod
    def of(cls, spec: RunSpec) -> SequenceSplit:
        """The run's, from its options (a strategy without them: the plain one)."""
        # A switch off reads as not given: the command line's flag is off unless set.
        given = spec.context is not None or spec.checkpointing is not None
        return cls(
            int(spec.context or 1),
            bool(spec.sequence_parallel),
            Checkpointing(spec.checkpointing or Checkpointing.NONE.value),
            given=given or bool(spec.sequence_parallel),
        )


def sequence_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options as a plan holds them (None: not given), each checked alone (one sentence
    for a bad one)."""
    context = options.get("context")
    if context is not None and (
        isinstance(context, bool) or not isinstance(context, int) or context < 1
    ):
        raise GpkError(
            f"context={context!r} must be a whole number of devices, 1 or more, e.g. context=2"
        )
    split = options.get("sequence_parallel")
    if split is not None and not isinstance(split, bool):
        raise GpkError(f"sequence_parallel={split!r} must be True or False")
    checkpointing = options.get("checkpointing")
    known = [c.value for c in Checkpointing]
    if checkpointing is not None and checkpointing not in known:
        raise GpkError(
            f"checkpointing={checkpointing!r} is not known; use one of "
            + ", ".join(repr(k) for k in known)
        )
    return {"context": context, "sequence_parallel": split, "checkpointing": checkpointing}


def check_sequence_split(spec: RunSpec, data: int, model: int) -> None:
    """The run's options fit its mesh of `data` × `model` devices: one sentence each, before
    anything is built (the backend is the run description's to check: `RunSpec`)."""
    split = SequenceSplit.of(spec)
    if data % split.context:
        raise GpkError(
            f"context={split.context} does not divide the data axis's {data} devices; give a "
            f"divisor of {data}, or more devices"
        )
    if split.context > 1 and spec.workers > 1:  # each worker feeds whole rows or chunks
        process_share(spec.global_batch, data * model, data, spec.workers, 0, split.context)
    if split.sequence_parallel and model < 2:
        raise GpkError(
            "sequence_parallel=True splits along the sequence over the tensor axis, and this "
            "run has none; give a model axis of 2 or more (strategy='tensor', or a pipeline's "
            "mesh=(1, 2)), or drop sequence_parallel="
        )


def named(split: SequenceSplit) -> str:
    """The first option the split sets, as the user wrote it (`context=2`)."""
    if split.context > 1:
        return f"context={split.context}"
    if split.sequence_parallel:
        return "sequence_parallel=True"
    return f"checkpointing={split.checkpointing.value!r}"
