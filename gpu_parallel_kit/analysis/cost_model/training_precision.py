"""A training precision's names and bytes: what the count runs under and what each device holds.

The one vocabulary of the memory planner (`memory_plan.py`), the plan search's arithmetic
(`model_card.py`, `parallel_plan_memory.py`, `parallel_plan_step_time.py`) and `gpk.search`:
"bf16", "fp16" and "mixed" train in mixed precision (16-bit weights, gradients and activations,
an fp32 master copy beside the optimizer's fp32 slots: ZeRO's 2 + 2 + 12 bytes per parameter
with Adam), "fp8" as bf16 with its matmuls at the FP8 peak and an FP8 copy of the weights
(3 + 2 + 12), "fp32" (or "float32") in single precision (4 + 4 + 8). Pure: a Keras
policy is named here as text, never imported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import GpkError
from .plan_figures import MemoryByPart

# Optimizer slots per parameter (each 4 bytes, fp32) before any master copy.
SLOTS = {"adam": 2, "adamw": 2, "lamb": 2, "sgd": 0, "momentum": 1, "rmsprop": 1, "adagrad": 1}


@dataclass(frozen=True)
class TrainingPrecision:
    """One training precision, as the planners and the count read it."""

    name: str  # the canonical name: "bf16", "fp16" or "fp32"
    policy: str  # the Keras dtype policy the count runs under
    width: int  # bytes of a parameter, a gradient and an activation element
    master_copy: bool  # an fp32 copy of the weights beside the optimizer's slots
    peak: str  # the device's peak the compute runs at (`Device.peak_flops`)
    weight_copy: int = 0  # bytes a parameter of a lower-precision copy its matmuls read


# fp32 matmuls run on TF32 tensor cores by default, in TensorFlow and in JAX on Ampere and later.
_RECORDS = (
    TrainingPrecision("bf16", "mixed_bfloat16", 2, True, "bf16"),
    TrainingPrecision("fp16", "mixed_float16", 2, True, "fp16"),
    TrainingPrecision("fp32", "float32", 4, False, "tf32"),
    # Transformer Engine's FP8: the matmuls on FP8 tensor cores, their weights cast to an FP8
    # copy kept beside the bf16 ones (1 byte a parameter more), the rest as bf16 trains it.
    TrainingPrecision("fp8", "mixed_bfloat16", 2, True, "fp8", weight_copy=1),
)
_ALIASES = {"mixed": "bf16", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
PRECISIONS = (*(r.name for r in _RECORDS), *_ALIASES)
_BY_NAME = {r.name: r for r in _RECORDS}


def training_precision(name: str) -> TrainingPrecision:
    """The record of a precision a user named; an unknown name is one sentence naming the known."""
    key = name.lower() if isinstance(name, str) else name
    found = _BY_NAME.get(_ALIASES.get(key, key)) if isinstance(key, str) else None
    if found is None:
        known = ", ".join(repr(p) for p in PRECISIONS)
        raise GpkError(f"precision={name!r} is not known; use one of {known}")
    return found


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter of each model state at a precision, with an optimizer."""

    params: float  # the parameters the step computes with
    grads: float
    optimizer: float  # K: the optimizer's slots and, in mixed precision, the fp32 master copy
    activation: float  # bytes per activation element


def state_bytes(optimizer: str | float, precision: str) -> StateBytes:
    """Mixed precision: 2 + 2 + K with K = 4 (master) + 4 per slot; fp32: 4 + 4 + 4 per slot.
    A number as `optimizer` is K itself."""
    record = training_precision(precision)
    if isinstance(optimizer, int | float) and not isinstance(optimizer, bool):
        if not (math.isfinite(optimizer) and optimizer >= 0):
            raise GpkError(f"optimizer={optimizer!r} as K must be 0 or more bytes per parameter")
        k = float(optimizer)
    else:
        name = str(optimizer).lower()
        if name not in SLOTS:
            known = ", ".join(SLOTS)
            raise GpkError(
                f"optimizer={optimizer!r} is not known; use one of {known}, or K (bytes of "
                "optimizer state per parameter) as a number"
            )
        k = 4.0 * SLOTS[name] + (4.0 if record.master_copy else 0.0)
    width = float(record.width)
    return StateBytes(width + record.weight_copy, width, k, width)


# What each sharding divides by the data axis: (parameters, gradients, optimizer state).
SHARDED_BY_DATA = {
    "none": (False, False, False),
    "zero-1": (False, False, True),
    "zero-2": (False, True, True),
    "fsdp": (True, True, True),
}


def model_state_bytes(
    parameters: float, per: StateBytes, data: int, tensor: int, stages: int, sharding: str
) -> MemoryByPart:
    """Bytes of parameters, gradients and optimizer state on one device: its shard of the model
    (1 / (tensor · stages)), each state further divided by `data` where `sharding` splits it
    (Rajbhandari et al., ZeRO, SC 2020); no activations."""
    if sharding not in SHARDED_BY_DATA:
        known = ", ".join(repr(s) for s in SHARDED_BY_DATA)
        raise GpkError(f"sharding={sharding!r} is not known; use one of {known}")
    share = parameters / (tensor * stages)
    params, grads, optimizer = SHARDED_BY_DATA[sharding]
    return MemoryByPart(
        params=share * per.params / (data if params else 1),
        grads=share * per.grads / (data if grads else 1),
        optimizer=share * per.optimizer / (data if optimizer else 1),
    )
