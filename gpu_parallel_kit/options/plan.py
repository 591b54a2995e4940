"""The memory planner's options of `gpk plan` and `%gpk plan`, written once, like the training
options beside them: both front ends build their parsers from these rows, and the defaults are
`plan_memory`'s own."""

from __future__ import annotations

from typing import Any

from ..analysis.cost_model.memory_plan import plan_memory
from ..analysis.cost_model.training_precision import PRECISIONS
from .argtypes import amount, positive
from .flag import Flag

PLAN: tuple[Flag, ...] = (
    Flag(
        "--params",
        "parameters, e.g. 7e9",
        goes_to="plan",
        type=amount,
        metavar="N",
        default=None,
    ),  # fmt: skip
    Flag(
        "--optimizer",
        "adam, sgd, momentum, ...; default: %(default)s",
        goes_to="plan",
        api_call=plan_memory,
    ),
    Flag(
        "--precision",
        "bf16, fp16 or mixed (16 bits with fp32 master weights), or fp32; default: %(default)s",
        goes_to="plan",
        choices=PRECISIONS,
        api_call=plan_memory,
    ),
    Flag(
        "--batch",
        "global batch; default: %(default)s",
        goes_to="plan",
        type=positive,
        metavar="G",
        api_call=plan_memory,
    ),  # fmt: skip
    Flag(
        "--activations",
        "activation elements per sample",
        goes_to="plan",
        type=amount,
        metavar="E",
        default=None,
    ),  # fmt: skip
    Flag(
        "--devices",
        "device counts; default: 8 64",
        goes_to="plan",
        type=positive,
        nargs="+",
        metavar="N",
        default=[8, 64],
    ),  # fmt: skip
    Flag(
        "--stages",
        "pipeline stages; default: the device count",
        goes_to="plan",
        type=positive,
        metavar="K",
        default=None,
    ),  # fmt: skip
    Flag(
        "--model-axis",
        "tensor's model axis; default: the device count",
        goes_to="plan",
        type=positive,
        metavar="M",
        default=None,
    ),  # fmt: skip
    Flag(
        "--gpu",
        "a GPU preset, e.g. h100: the table says what fits on it",
        goes_to="plan",
        metavar="PRESET",
        dest="device",
        default=None,
    ),  # fmt: skip
)


def planned(parsed: Any) -> Any:
    """`plan_memory`'s table for a parsed `plan` command line, from either front end."""
    return plan_memory(**{option.name: getattr(parsed, option.name) for option in PLAN})
