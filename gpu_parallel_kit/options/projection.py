"""The projection's options of `gpk compare`, `%gpk compare` and `%gpk panel`: the comparison
carried onto GPUs this machine does not have (`Comparison.project`), written once, as the
training options are in `table.py`.

Every default is None, which leaves it to the projection's own (`Comparison.project` and
`analysis.cost_model.projected_rows.ProjectionOptions` hold them); the help names it. The link,
GPU, precision and compute source are checked by `comparison.check_projection` before anything
runs.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..comparison import Comparison, projection_presets
from .argtypes import positive
from .flag import Flag

_PRESETS = projection_presets()


def _named(kind: str) -> str:
    return ", ".join(_PRESETS[kind])


# `compare` and the panel: the comparison carried onto GPUs this machine does not have
# (`Comparison.project`). None leaves each to the projection's own default.
PROJECTION: tuple[Flag, ...] = (
    Flag(
        "--project",
        f"after the comparison, add rows projected onto GPUs joined by this link ({_named('link')})"
        ", labelled projected; default: none",
        goes_to="projection",
        metavar="LINK",
        default=None,
    ),
    Flag(
        "--project-devices",
        "device counts to project onto; default: "
        + " ".join(
            str(n) for n in inspect.signature(Comparison.project).parameters["devices"].default
        ),
        goes_to="projection",
        nargs="+",
        type=positive,
        metavar="N",
        default=None,
    ),
    Flag(
        "--gpu",
        f"the GPU projected onto ({_named('gpu')}); default: the link's usual one (nvlink3: a100, "
        "else h100)",
        goes_to="projection",
        metavar="GPU",
        default=None,
    ),
    Flag(
        "--precision",
        f"the projected GPU's arithmetic ({_named('precision')}; bf16 and fp16 are mixed "
        "precision); default: bf16",
        goes_to="projection",
        metavar="PRECISION",
        default=None,
    ),
    Flag(
        "--project-batch",
        "the global batch to project at (a GPU trains at larger batches than a CPU measures); "
        "default: the measured one",
        goes_to="projection",
        type=positive,
        metavar="N",
        default=None,
    ),
    Flag(
        "--compute",
        "counted: the training step counted by the compiler, on the GPU's roofline; measured: "
        "this machine's step time; default: counted",
        goes_to="projection",
        metavar="SOURCE",
        default=None,
    ),
)
# The projection's option names and Comparison.project's keyword for each.
PROJECTION_ARGUMENTS = {
    "project": "preset",
    "project_devices": "devices",
    "gpu": "device",
    "precision": "precision",
    "project_batch": "global_batch",
    "compute": "compute",
}


def projection_values(parsed: Any) -> dict[str, Any]:
    """The projection options of a parsed command line (None where a command has none)."""
    return {option.name: getattr(parsed, option.name, None) for option in PROJECTION}
