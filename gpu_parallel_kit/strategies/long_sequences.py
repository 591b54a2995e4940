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

if TYPE_CHECKING:
    from ..runs.description.run_spec import RunSpec


class Checkpointing(enum.StrEnum):
    """What a run recomputes in the backward instead of keeping from the forward."""

    NONE = "none"
    SELECTIVE = "selective"  # each attention layer
    FULL = "full"  # each Transformer block


CONTEXT = Option(
    "context",
    positive,
    1,
    "devices each sample's sequence is split over, inside the data axis (context parallelism); "
    "JAX only",
    metavar="C",
)
SEQUENCE_PARALLEL = Option(
    "sequence_parallel",
    bool,
    False,
    "split the blocks' norms along the sequence over the tensor axis (needs a model axis); "
    "JAX only",
)
CHECKPOINTING = Option(
    "checkpointing",
    str,
    Checkpointing.NONE.value,
    "recompute in the backward: 'selective' (each attention layer) or 'full' (each block); "
    "JAX only",
    choices=tuple(c.value for c in Checkpointing),
)
LONG_SEQUENCE_OPTIONS = (CONTEXT, SEQUENCE_PARALLEL, CHECKPOINTING)


@dataclass(frozen=True)
class SequenceSplit:
    """How a run splits and recomputes a long sequence (see the module)."""

    context: int = 1
    sequence_parallel: bool = False
    checkpointing: Checkpointing = Checkpointing.NONE

    @property
    def any(self) -> bool:
        """Whether the run does anything beyond the plain strategy."""
        return self != SequenceSplit()

    @classmethod
    def of(cls, spec: RunSpec) -> SequenceSplit:
        """The run's, from its options (a strategy without them: the plain one)."""
        return cls(
            int(spec.context or 1),
            bool(spec.sequence_parallel),
            Checkpointing(spec.checkpointing or Checkpointing.NONE.value),
        )


def sequence_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options as a plan holds them, each checked alone (one sentence for a bad one)."""
    context = options.get("context", 1)
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise GpkError(
            f"context={context!r} must be a whole number of devices, 1 or more, e.g. context=2"
        )
    split = options.get("sequence_parallel", False)
    if not isinstance(split, bool):
        raise GpkError(f"sequence_parallel={split!r} must be True or False")
    checkpointing = options.get("checkpointing", Checkpointing.NONE.value)
    known = [c.value for c in Checkpointing]
    if checkpointing not in known:
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
    if split.sequence_parallel and model < 2:
        raise GpkError(
            "sequence_parallel=True splits along the sequence over the tensor axis, and this "
            "run has none; use strategy='tensor' with a model axis of 2 or more, or drop "
            "sequence_parallel="
        )
    if split.sequence_parallel and split.context > 1:
        raise GpkError(
            "sequence_parallel=True with context= both split the sequence; use one of them"
        )


def named(split: SequenceSplit) -> str:
    """The first option the split sets, as the user wrote it (`context=2`)."""
    if split.context > 1:
        return f"context={split.context}"
    if split.sequence_parallel:
        return "sequence_parallel=True"
    return f"checkpointing={split.checkpointing.value!r}"
