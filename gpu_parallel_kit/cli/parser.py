"""The `gpk` command line's grammar: commands, options, their help and their value checks.

Kept apart from `cli/commands.py` so the handlers stay short and the help texts live in one place.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ..options.argtypes import fraction
from ..options.calibrate import CALIBRATE
from ..options.plan import PLAN
from ..options.projection import PROJECTION
from ..options.search import HERE, SEARCH
from ..options.table import COMPARE, HISTORY, PROGRESS, RUN, TRAINING, VERBOSE, Flag
from ..runs.description.synthetic_data import SYNTHETIC_SETS
from ..strategies import BACKENDS


class UsageError(Exception):
    """A bad command line; main prints the message alone, without argparse's usage block."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


# ---- commands and options -------------------------------------------------------------------


def build_parser(
    handlers: dict[str, Callable[[argparse.Namespace], int]],
) -> argparse.ArgumentParser:
    """The whole command line; `handlers` maps each command (and "" for none) to its function."""
    parser = _Parser(
        prog="gpk",
        description="Compare data-parallel training strategies of a Keras model on real GPUs or "
        "on virtual devices carved out of the CPU. Every run trains in a fresh worker process "
        "and is appended to the run log (./gpk_runs.sqlite, or $GPK_LOG).",
        epilog="Run 'gpk COMMAND --help' for the options of a command.",
    )
    parser.set_defaults(handler=handlers[""])
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    training = _training_options()
    _add(
        commands,
        "devices",
        handlers["devices"],
        "list the devices runs can use",
        "List the devices a run can use: the real GPUs, or, without GPUs, the virtual devices "
        "carved out of the CPU (GPK_MAX_VIRTUAL sets how many).",
    )
    run = _add(
        commands,
        "run",
        handlers["run"],
        "train once under one strategy",
        "Train the model once under one strategy and print its row of measurements. "
        "Exit status 0 when the run finished, 1 when it failed.",
        parents=[training],
        epilog="Example: gpk run --model mlp --strategy data --devices 2 --batch-size 512",
    )
    _add_options(run, RUN)
    compare = _add(
        commands,
        "compare",
        handlers["compare"],
        "run every strategy on every device count",
        "Run every strategy on every device count (single runs once, on one device), print the "
        "comparison table, and with --out write a report. Exit status 0 when every run "
        "finished, 1 when one failed.",
        parents=[training],
        epilog="Example: gpk compare --model mymodels:build --data train.npz --devices 1 2 "
        "--out report --project nvlink4 --gpu h100",
    )
    _add_options(compare, COMPARE)
    _add_options(compare.add_argument_group("projection onto GPUs"), PROJECTION)
    demo = _add(
        commands,
        "demo",
        handlers["demo"],
        "compare single and data parallel on the built-in MLP",
        "Compare single-device and data parallel training of the built-in MLP on 1, 2 and 4 "
        "devices (virtual ones when GPUs are missing), print the table and write a report. "
        "7-12 s on a 2-core CPU with JAX installed, 11-17 s on TensorFlow; GPK_QUICK=1 makes "
        "it shorter.",
    )
    demo.add_argument(
        "--out", metavar="DIR", default="gpk_report", help=_OUT_HELP + "; default: %(default)s"
    )
    demo.add_argument(
        "--backend",
        choices=BACKENDS,
        help="tensorflow (tf.distribute) or jax (keras.distribution); default: jax where it is "
        "installed, as it starts sooner, else tensorflow",
    )
    _add_options(demo, (PROGRESS, VERBOSE, _LOG))
    worker = _add(
        commands,
        "worker",
        handlers["worker"],
        "serve multiworker runs as one worker of a named cluster",
        "Join the coordinator named in the cluster file (the notebook or gpk that starts the "
        "runs), then train each multiworker run it hands out as worker INDEX, until stopped. "
        "Start one on every host of the cluster (ssh, srun, a Kubernetes indexed Job); every "
        "host needs the same GPK_CLUSTER_KEY.",
        epilog="Example: GPK_CLUSTER_KEY=secret gpk worker --cluster cluster.json --index 1",
    )
    worker.add_argument("--cluster", required=True, metavar="FILE", help="the cluster file")
    worker.add_argument(
        "--index",
        required=True,
        type=int,
        metavar="I",
        help="this host's place in the file's worker list (0 is the chief)",
    )
    worker.add_argument(
        "--join-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="give up when no coordinator answers for this long; default: %(default)g",
    )
    worker.add_argument(
        "--once", action="store_true", help="exit after one run instead of serving the next"
    )
    _add_plan(commands, handlers["plan"])
    _add_search(commands, handlers["search"])
    calibrate = _add(
        commands,
        "calibrate",
        handlers["calibrate"],
        "measure the devices at hand for the cost model",
        "Time matrix products, elementwise chains, a compiled call and the collectives plans use "
        "on the devices at hand, every one busy at once (a minute by default), and with --model "
        "the model's own step; print a row per count of busy devices and keep the calibration "
        "in the cache folder, where runs and comparisons of the same devices find the newest "
        "(gpk.calibrate).",
        epilog="Example: gpk calibrate --backend jax --model mlp --budget 30",
    )
    _add_options(calibrate, CALIBRATE)
    history = _add(
        commands,
        "history",
        handlers["history"],
        "show the runs in the run log",
        "Show the runs in the run log, oldest first, one row per configuration (a comparison's "
        "rounds merged); speedup is computed within each experiment.",
    )
    _add_options(history, HISTORY)
    return parser


def _add_plan(commands: Any, handler: Callable) -> None:
    plan = _add(
        commands,
        "plan",
        handler,
        "memory per device of a model too large to build here, per strategy",
        "Model the bytes per device of parameters, gradients, optimizer state and activations "
        "under data, ZeRO-1/2, fsdp (ZeRO-3), pipeline and tensor parallelism (Rajbhandari et "
        "al., ZeRO, SC 2020). Nothing is trained.",
        epilog="Example: gpk plan --params 7e9 --devices 8 64 --gpu h100",
    )
    _add_options(plan, PLAN)


def _add_search(commands: Any, handler: Callable) -> None:
    search = _add(
        commands,
        "search",
        handler,
        "which data × fsdp × tensor × pipeline plan fits a GPU cluster and is fastest",
        "Count one sample's training step of the model without allocating its weights (once; "
        "kept in the user's cache folder), then rank every data × fsdp × tensor × pipeline plan "
        "on the cluster by its modelled step time, those that fit each GPU's memory first, and "
        "say why the best wins. Nothing is trained.",
        epilog="Example: gpk search --model mymodels:build_gpt --inputs token_ids=2048:int32 "
        "padding_mask=2048:int32 --device a100 --nodes 16 --per-node 8 --inside nvlink3 "
        "--between net400g --global-batch 512",
    )
    search.add_argument(
        "--model",
        required=True,
        metavar="MODEL",
        help="module:function naming a zero-argument function that returns a Keras model, a "
        "built-in model or a saved .keras file",
    )
    _add_options(search, SEARCH)
    _add_options(search, HERE)
    search.add_argument(
        "--data",
        metavar="DATA",
        help="with --run-here or --compare-here: what the runs here train on, a built-in set "
        "or a .npz file with arrays x and y",
    )


_OUT_HELP = "folder for the report (table.csv, table.md and the figures as PNG)"
_LOG = next(option for option in TRAINING if option.name == "log")


def _add(commands: Any, name: str, handler: Callable, summary: str, description: str, **kw):
    parser = commands.add_parser(name, help=summary, description=description, **kw)
    parser.set_defaults(handler=handler)
    return parser


def _training_options() -> argparse.ArgumentParser:
    """Options shared by `run` and `compare`: what to train (the command line's own forms of the
    model and the data), then the option table's training options."""
    options = _Parser(add_help=False)
    sets = ", ".join(SYNTHETIC_SETS)
    options.add_argument(
        "--model",
        default="mlp",
        metavar="MODEL",
        help="a built-in model (mlp, cnn, transformer), a saved .keras file, or module:function "
        "naming a zero-argument function that returns a Keras model (imported from the current "
        "folder or the Python path); default: %(default)s",
    )
    options.add_argument(
        "--data",
        metavar="DATA",
        help=f"a built-in synthetic set ({sets}) or a .npz file with arrays x and y; "
        "default: the built-in model's own set (required for other models)",
    )
    held_out = options.add_argument_group("validation").add_mutually_exclusive_group()
    held_out.add_argument(
        "--validation-split",
        type=fraction,
        metavar="F",
        help="hold out this fraction of the training data (chosen at random from the seed) and "
        "evaluate on it during training; default: no validation",
    )
    held_out.add_argument(
        "--validation-data",
        metavar="PATH",
        help="a .npz file with arrays x and y to evaluate on during training",
    )
    _add_options(options, TRAINING)
    return options


def _add_options(parser: argparse.ArgumentParser, options: tuple[Flag, ...]) -> None:
    for option in options:
        flags, kwargs = option.parser_arguments()
        parser.add_argument(*flags, **kwargs)
