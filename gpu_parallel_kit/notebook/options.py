"""The `%gpk` options of `run`, `compare` and `panel`: generated from the option table, as `gpk`'s.

Only the model, the data and the validation data are the magic's own: here they are names of
objects in the notebook (`%gpk run build_model --data x y`), which `names.py` looks up. Every
other option, its type, default and help come from `options.table`, and `request_from` maps them
onto the API exactly as the command line does.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from IPython.core.magic_arguments import argument

from ..options.calibrate import CALIBRATE
from ..options.plan import PLAN
from ..options.projection import PROJECTION
from ..options.request import Request
from ..options.request import request_from as request_with
from ..options.search import HERE, SEARCH
from ..options.table import COMPARE, HISTORY, RUN, TRAINING, Flag
from ..runs.description.synthetic_data import SYNTHETIC_SETS
from .names import resolve_data, resolve_model, resolve_validation

_SETS = ", ".join(SYNTHETIC_SETS)
# The magic's own forms of the model and the data, then the shared training options.
_OWN_OPTIONS = (
    argument(
        "model",
        nargs="?",
        default="mlp",
        help="a function in this notebook that returns a Keras model, a built-in model (mlp, "
        "cnn, transformer) or a .keras file; default: mlp",
    ),
    argument(
        "--data",
        nargs="+",
        metavar="NAME",
        help="the input and target arrays in this notebook (--data x y), one name holding (x, y) "
        f"or a dataset builder, or a built-in set ({_SETS}); default: the built-in model's own",
    ),
    argument(
        "--validation",
        nargs="+",
        metavar="NAME|F",
        help="data to evaluate on during training: arrays in this notebook (--validation x_val "
        "y_val), one name holding them or a dataset builder, or a fraction of the training "
        "data (0.1); default: none",
    ),
)
_HELP_OPTION = argument("-h", "--help", action="store_true", help="show this help")


def _decorators(options: Sequence[Flag]) -> list[Callable]:
    decorators = []
    for option in options:
        flags, kwargs = option.parser_arguments()
        decorators.append(argument(*flags, **kwargs))
    return decorators


def _apply(func: Callable, decorators: Sequence[Callable]) -> Callable:
    # Decorators apply bottom-up: reversed, the help lists the options in table order.
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def training(func: Callable) -> Callable:
    """Decorator: the model, data and training options of run, compare and panel."""
    return _apply(func, [*_OWN_OPTIONS, *_decorators(TRAINING)])


def run_options(func: Callable) -> Callable:
    """Decorator: `run`'s strategy, devices and progress options."""
    return _apply(func, _decorators(RUN))


def compare_options(func: Callable) -> Callable:
    """Decorator: `compare`'s strategies, device counts, report folder and progress options."""
    return _apply(func, _decorators(COMPARE))


def projection_options(func: Callable) -> Callable:
    """Decorator: the projection onto GPUs after a comparison (compare and panel)."""
    return _apply(func, _decorators(PROJECTION))


def plan_options(func: Callable) -> Callable:
    """Decorator: the memory planner's options (`options/plan.py`)."""
    return _apply(func, _decorators(PLAN))


def search_options(func: Callable) -> Callable:
    """Decorator: the plan search's model (a name in this notebook) and options
    (`options/search.py`); `--inputs` may also name one sample held in the notebook; then the
    runs here of the leading plans, on `--data` named in the notebook."""
    model = argument("model", help="a function in this notebook that returns a Keras model")
    data = argument(
        "--data",
        nargs="+",
        metavar="NAME",
        help="with --run-here or --compare-here: the input and target arrays in this notebook "
        "the runs here train on (--data x y), or one name holding (x, y) or a dataset builder",
    )
    return model(_apply(func, [*_decorators(SEARCH), *_decorators(HERE), data]))


def calibrate_options(func: Callable) -> Callable:
    """Decorator: the calibration's options (`options/calibrate.py`); `--model` may name a
    function in this notebook."""
    return _apply(func, _decorators(CALIBRATE))


def history_options(func: Callable) -> Callable:
    """Decorator: `history`'s limit and run log options."""
    return _apply(func, _decorators(HISTORY))


def help_option(func: Callable) -> Callable:
    """Decorator: `-h/--help` prints the command's help (magic parsers have none of their own)."""
    return _HELP_OPTION(func)


def request_from(args: argparse.Namespace, namespace: Mapping[str, Any]) -> Request:
    """The Request the options describe, with names resolved in the notebook's namespace."""
    return request_with(
        args,
        model=resolve_model(args.model, namespace),
        data=resolve_data(args.data, namespace),
        validation=resolve_validation(args.validation, namespace),
    )
