"""The memory planner's options of `gpk plan` and `%gpk plan`, written once, like the training
options beside them: both front ends build their parsers from these rows, and the defaults are
`plan_memory`'s own."""

from __future__ import annotations

from typing import Any

from ..analysis.cost_model.memory_plan import plan_memory
from ..analysis.cost_model.training_precision import PRECISIONS
from .argtypes import amount, positive
from .flag import Flag


def _planned(flag: str, text: str, **details: Any) -> Flag:
    """A flag of `gpk plan` and `%gpk plan`: a keyword of `plan_memory`, its default too."""
    return Flag(flag, text, goes_to="plan", api_call=plan_memory, **details)


PLAN: tuple[Flag, ...] = (
    _planned("--params", "parameters, e.g. 7e9", type=amount, metavar="N"),
    _planned("--optimizer", "adam, sgd, momentum, ...; default: %(default)s"),
    _planned(
        "--precision",
        "bf16, fp16 or mixed (16 bits with fp32 master weights), or fp32; default: %(default)s",
        choices=PRECISIONS,
    ),
    _planned("--batch", "global batch; default: %(default)s", type=positive, metavar="G"),
    _planned("--activations", "activation elements per sample", type=amount, metavar="E"),
    _planned("--devices", "device counts; default: 8 64", type=positive, nargs="+", metavar="N"),
    _planned("--stages", "pipeline stages; default: the device count", type=positive, metavar="K"),
    _planned(
        "--model-axis",
        "tensor's model axis; default: the device count",
        type=positive,
        metavar="M",
    ),
    _planned(
        "--gpu",
        "a GPU preset, e.g. h100: the table says what fits on it",
        metavar="PRESET",
        dest="device",
    ),
)


def planned(parsed: Any) -> Any:
    """`plan_memory`'s table for a parsed `plan` command line, from either front end."""
    return plan_memory(**{option.name: getattr(parsed, option.name) for option in PLAN})
