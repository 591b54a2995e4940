"""The calibration's options of `gpk calibrate` and `%gpk calibrate`, written once: the devices,
the backend, the probe's budget and the model whose step is timed beside it.

Both front ends build their parsers from these rows and call `gpk.calibrate` with `keywords`.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..api import calibrate
from ..strategies import BACKENDS
from .argtypes import amount, positive
from .flag import Flag


def _calibrated(flag: str, text: str, **details: Any) -> Flag:
    """A flag of `gpk calibrate` and `%gpk calibrate`: a keyword of `gpk.calibrate`, its
    default the API's."""
    return Flag(flag, text, goes_to="calibrate", api_call=calibrate, **details)


CALIBRATE: tuple[Flag, ...] = (
    _calibrated(
        "--devices",
        "how many devices; default: every GPU, else 4 virtual devices of the CPU",
        type=positive,
        metavar="N",
    ),
    _calibrated(
        "--backend",
        "jax or tensorflow; default: the kit's default backend",
        choices=BACKENDS,
    ),
    _calibrated(
        "--budget",
        "seconds the devices' probe may take (a model's step comes on top); default: %(default)s",
        type=amount,
        dest="budget_s",
        metavar="SECONDS",
    ),
    _calibrated(
        "--model",
        "a built-in model (mlp, cnn, transformer) or module:function, whose own training step "
        "is timed too; default: none",
        metavar="MODEL",
    ),
    _calibrated(
        "--batch-size",
        "the global batch the model's runs will take; default: %(default)s",
        type=positive,
    ),
    _calibrated(
        "--no-save",
        "keep it out of the cache folder, where runs and comparisons find the newest",
        action="store_false",
        dest="save",
        default=True,
    ),
    _calibrated(
        "--no-progress",
        "show no progress bar",
        action="store_false",
        dest="progress",
        default=True,
    ),
)


def keywords(args: argparse.Namespace) -> dict[str, Any]:
    """`gpk.calibrate`'s keywords from a parsed command line (the model as given: each front end
    resolves its name)."""
    return {flag.name: flag.to_api(getattr(args, flag.name)) for flag in CALIBRATE}
