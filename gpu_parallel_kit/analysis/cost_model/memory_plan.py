"""What fits, on how many devices: a model's memory per device under each strategy, modelled.

For models too large to build here (`params=7e9`). Model states follow the ZeRO paper
(Rajbhandari et al., SC 2020, section 3.1): mixed-precision Adam keeps 2 + 2 + 12 bytes per
parameter, split over the devices as data, ZeRO-1, ZeRO-2 and fsdp (ZeRO-3) split them; a
pipeline of K stages holds 1/K of every state, tensor parallelism over M holds 1/M. The model
states are the plan search's own (`training_precision.model_state_bytes`), each row one plan of
it. Pure: no TensorFlow, no JAX; a model builder is called here only to count its parameters.

The formulas, the fp32 case and how activations split: `docs/memory.md`, "Planning a model too
large to build".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from ...errors import GpkError
from ...strategies.data import DATA
from ...strategies.fsdp import FSDP
from ...strategies.pipeline import PIPELINE
from ...strategies.tensor import TENSOR
from . import hardware_presets
from .training_precision import PRECISIONS, StateBytes, model_state_bytes, state_bytes

SOURCE = "Rajbhandari et al., ZeRO, SC 2020 (model states); activations as given"
__all__ = ["PRECISIONS", "StateBytes", "format_plan", "plan_memory", "state_bytes"]


def count_params(params: float | None, model: Any) -> float:
    """Ψ from `params`, or from `model`: a built model (`count_params()`) or a builder of one."""
    if params is None and model is None:
        raise GpkError(
            "neither params= nor model= was given; give one of them: params= a count "
            "(e.g. params=7e9) or model= a Keras model or a builder of one"
        )
    if params is not None and model is not None:
        raise GpkError(
            f"params={params!r} and model={model!r} were both given; give only one of them"
        )
    if params is not None:
        if isinstance(params, bool) or not isinstance(params, int | float) or not params > 0:
            raise GpkError(f"params={params!r} must be a positive count, e.g. params=7e9")
        return float(params)
    is_built = hasattr(model, "count_params") and not isinstance(model, type)
    built = model if is_built or not callable(model) else model()
    if not hasattr(built, "count_params"):
        raise GpkError(
            f"model={model!r} is neither a Keras model nor a builder of one; pass params= instead"
        )
    return float(built.count_params())


def activation_elements(activations: float | Sequence[Any] | None) -> float:
    """Elements per sample: a number, or per-layer shapes (without the batch) summed."""
    if activations is None:
        return 0.0
    if isinstance(activations, int | float) and not isinstance(activations, bool):
        if activations < 0:
            raise GpkError(f"activations={activations} must be 0 or more elements per sample")
        return float(activations)
    total = 0.0
    for shape in activations:
        dims = (shape,) if isinstance(shape, int) else tuple(shape)
        if not dims or any(not isinstance(d, int) or d < 1 for d in dims):
            raise GpkError(
                f"activation shape {shape!r} must be positive whole sizes per sample, e.g. "
                "(2048, 4096) for a sequence of 2048 tokens of width 4096"
            )
        total += math.prod(dims)
    return total


def plan_memory(
    params: float | None = None,
    *,
    model: Callable[[], Any] | Any = None,
    optimizer: str | float = "adam",
    precision: str = "mixed",
    batch: int = 1,
    activations: float | Sequence[Any] | None = None,
    devices: int | Sequence[int] = (8, 64),
    stages: int | None = None,
    model_axis: int | None = None,
    device: str | Any = None,
) -> pd.DataFrame:
    """Bytes per device of each model state and the activations, per strategy and device count.

    `params` (Ψ, e.g. 7e9) or `model` (a builder, called here to count them); `optimizer` a name
    (adam, sgd, momentum, ...) or K; `precision` "mixed" (fp16/bf16 with fp32 master weights)
    or "fp32"; `batch` the global batch; `activations` elements per sample, or per-layer shapes
    per sample; `devices` the counts (N); `stages` the pipeline's K and `model_axis` tensor's M
    (default: N); `device` a preset ("h100") or dict, for the `fits` column.

    >>> plan_memory(params=7.5e9, devices=64).set_index("strategy")["total_gb"].round(1)
    """
    psi = count_params(params, model)
    per = state_bytes(optimizer, precision)
    counts = [devices] if isinstance(devices, int) else list(devices)
    for n in counts:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise GpkError(f"devices={n!r} must be whole counts of 1 or more, e.g. devices=[8, 64]")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise GpkError(f"batch={batch!r} must be a whole global batch of 1 or more")
    acts = activation_elements(activations) * per.activation * batch
    limit = None if device is None else hardware_presets.device(device)
    rows = []
    for n in counts:
        k, m = stages or n, model_axis or n
        a = acts / n
        data, fsdp, pipeline, tensor = DATA.name, FSDP.name, PIPELINE.name, TENSOR.name

        def states(data_axis: int, tensor_axis: int, stage_count: int, sharding: str) -> dict:
            held = model_state_bytes(psi, per, data_axis, tensor_axis, stage_count, sharding)
            return {k: v for k, v in held.columns().items() if k != "activations_bytes"}

        rows += [
            _row(data, n, 0, states(n, 1, 1, "none"), a, "replicas", False),
            _row("zero-1", n, 1, states(n, 1, 1, "zero-1"), a, "optimizer sharded", True),
            _row("zero-2", n, 2, states(n, 1, 1, "zero-2"), a, "plus gradients", True),
            _row(fsdp, n, 3, states(n, 1, 1, "fsdp"), a, "plus parameters", False),
            _row(pipeline, n, None, states(1, 1, k, "none"), acts / k, f"K={k}", False),
            _row(tensor, n, None, states(1, m, 1, "none"), acts / m, f"M={m}", False),
        ]
    table = pd.DataFrame(rows)
    table["total_bytes"] = table[
        ["params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes"]
    ].sum(axis=1)
    table["total_gb"] = table["total_bytes"] / 1e9
    table["fits"] = None if limit is None else table["total_bytes"] <= limit.memory_bytes
    table.attrs.update(
        source=SOURCE,
        params=psi,
        optimizer_bytes_per_param=per.optimizer,
        precision=precision,
        device=None if limit is None else limit.name,
    )
    return table


def _row(
    name: str,
    devices: int,
    zero: int | None,
    states: dict[str, float],
    activations: float,
    note: str,
    modelled_only: bool,
) -> dict[str, Any]:
    return {
        "strategy": name,
        "devices": devices,
        "zero_stage": zero,
        **states,
        "activations_bytes": activations,
        # ZeRO-1 and -2 have no engine in the kit: nothing here can measure them
        "modelled_only": modelled_only,
        "note": note + ("; modelled only" if modelled_only else ""),
    }


def format_plan(table: pd.DataFrame) -> str:
    """The plan as text, in GB (10^9 bytes, the paper's unit), for `gpk plan`."""
    shown = pd.DataFrame(
        {
            "strategy": table["strategy"],
            "devices": table["devices"],
            **{
                f"{part}_gb": (table[f"{part}_bytes"] / 1e9).map("{:,.2f}".format)
                for part in ("params", "grads", "optimizer", "activations", "total")
            },
        }
    )
    if table.attrs.get("device"):
        shown[f"fits_{table.attrs['device']}"] = table["fits"].map({True: "yes", False: "no"})
    shown["note"] = table["note"]
    psi = table.attrs.get("params", 0.0)
    head = (
        f"{psi:,.0f} parameters, {table.attrs.get('precision')} precision, "
        f"{table.attrs.get('optimizer_bytes_per_param'):g} bytes of optimizer state per "
        f"parameter; bytes per device, modelled ({table.attrs.get('source')})"
    )
    return head + "\n" + shown.to_string(index=False)
