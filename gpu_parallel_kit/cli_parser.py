"""The `gpk` command line's grammar: commands, options, their help and their value checks.

Kept apart from `cli.py` so the handlers stay short and the help texts live in one place.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from .api import DEFAULT_TIMEOUT_S
from .argtypes import balance, device_choice, epochs, fraction, positive, target, whole
from .lr_rules import LR_RULES
from .schedules import SCHEDULES
from .spec import ALL_REDUCE, MODES, SCALING, STRATEGIES  # the API's own choices, for the help
from .synthetic import SYNTHETIC_SETS


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
    run.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default="single",
        help="how to spread training over the devices: single (one device), data (replicas "
        "with an all-reduce of the gradients) or model (the layers cut into stages on the "
        "devices); default: %(default)s",
    )
    run.add_argument(
        "--devices",
        type=device_choice,
        default=1,
        metavar="N|I,J",
        help="a device count like 2, or device indices like 0,1 (see 'gpk devices'); "
        "default: %(default)s",
    )
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
        "--out report",
    )
    compare.add_argument(
        "--strategies",
        nargs="+",
        choices=STRATEGIES,
        default=["single", "data"],
        metavar="STRATEGY",
        help=f"strategies to compare, from {', '.join(STRATEGIES)}; default: single data",
    )
    compare.add_argument(
        "--devices",
        nargs="+",
        type=whole,
        default=[1, 2, 4],
        metavar="N",
        help="device counts to compare; default: 1 2 4",
    )
    compare.add_argument("--out", metavar="DIR", help=_OUT_HELP + "; none unless given")
    demo = _add(
        commands,
        "demo",
        handlers["demo"],
        "compare single and data parallel on the built-in MLP",
        "Compare single-device and data parallel training of the built-in MLP on 1, 2 and 4 "
        "devices (virtual ones when GPUs are missing), print the table and write a report. "
        "About half a minute on a 2-core CPU; GPK_QUICK=1 makes it shorter.",
    )
    demo.add_argument(
        "--out", metavar="DIR", default="gpk_report", help=_OUT_HELP + "; default: %(default)s"
    )
    _add_output_options(demo)
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
    history = _add(
        commands,
        "history",
        handlers["history"],
        "show the runs in the run log",
        "Show the runs in the run log, oldest first; speedup is computed within each experiment.",
    )
    history.add_argument(
        "--limit", type=positive, metavar="N", help="show only the last N runs; default: all"
    )
    history.add_argument("--log", metavar="PATH", help=_LOG_HELP)
    return parser


_OUT_HELP = (
    "folder for the report (table.csv, table.md, wall_time.png, throughput.png, speedup.png)"
)
_LOG_HELP = "the run log file; default: $GPK_LOG, else gpk_runs.sqlite in the current folder"


def _add(commands: Any, name: str, handler: Callable, summary: str, description: str, **kw):
    parser = commands.add_parser(name, help=summary, description=description, **kw)
    parser.set_defaults(handler=handler)
    return parser


def _training_options() -> argparse.ArgumentParser:
    """Options shared by `run` and `compare`: what to train, how, and where to log it."""
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
    options.add_argument(
        "--batch-size",
        type=whole,
        default=256,
        metavar="N",
        help="global batch under strong scaling, per-device batch under weak scaling; it must "
        "split evenly over the devices; default: %(default)s",
    )
    options.add_argument(
        "--epochs",
        type=whole,
        default=1,
        metavar="N",
        help="passes over the data; default: %(default)s",
    )
    options.add_argument(
        "--steps-per-epoch",
        type=whole,
        metavar="N",
        help="optimizer steps per epoch; default: as many full global batches as the data holds",
    )
    options.add_argument(
        "--seed",
        type=whole,
        default=0,
        metavar="N",
        help="seed of the weights, data and batch order; default: %(default)s",
    )
    options.add_argument(
        "--scaling",
        choices=SCALING,
        default="strong",
        help="strong: the global batch stays the same on more devices; weak: each device's "
        "batch stays the same; default: %(default)s",
    )
    options.add_argument(
        "--mode",
        choices=MODES,
        help="fit: Keras model.fit; explicit: a custom training loop whose gradient all-reduce "
        "is visible and timed; default: fit, and explicit for multiworker (its only loop)",
    )
    options.add_argument(
        "--all-reduce",
        choices=ALL_REDUCE,
        default="auto",
        help="how data parallel runs sum gradients across devices (nccl needs GPUs); "
        "default: %(default)s",
    )
    options.add_argument(
        "--workers",
        type=positive,
        metavar="W",
        help="multiworker: worker processes started on this machine, each with --devices "
        "devices; default: 2, or the cluster's count with --cluster",
    )
    options.add_argument(
        "--cluster",
        metavar="FILE",
        help='multiworker: a JSON file {"worker": ["host1:23456", ...], "coordinator": '
        '"host0:23400"} naming the hosts, where `gpk worker` runs; default: local workers',
    )
    options.add_argument(
        "--schedule",
        choices=SCHEDULES,
        help="model parallel: naive (one batch, stage after stage), gpipe (all forwards, then "
        "all backwards) or 1f1b (fewer activations held); default: naive, or gpipe with "
        "--micro-batches",
    )
    options.add_argument(
        "--micro-batches",
        type=positive,
        metavar="M",
        help="model parallel: micro-batches each global batch is cut into; default: 1",
    )
    options.add_argument(
        "--balance",
        type=balance,
        default="params",
        metavar="params|time|I,J",
        help="model parallel: split the layers into stages of equal parameter count (params), "
        "equal measured time (time), or at the given layer indices where stages 1.. start; "
        "default: %(default)s",
    )
    options.add_argument(
        "--memory-budget",
        type=positive,
        metavar="MIB",
        help="refuse a run whose parameters and optimizer state need more than this many MiB "
        "on any device (shows why a model must be split); default: no budget",
    )
    options.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="stop a run that has not finished after this long; default: %(default)g",
    )
    _add_convergence_options(options)
    _add_output_options(options)
    return options


def _add_convergence_options(options: argparse.ArgumentParser) -> None:
    """Time to accuracy: validation data, the learning-rate rule, the target, determinism."""
    group = options.add_argument_group("time to accuracy")
    held_out = group.add_mutually_exclusive_group()
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
    group.add_argument(
        "--validation-every-steps",
        type=positive,
        metavar="N",
        help="evaluate every N optimizer steps (and after the last); default: each epoch end",
    )
    group.add_argument(
        "--lr-scaling",
        choices=LR_RULES,
        default="none",
        help="scale the learning rate when the global batch grows by k (weak scaling): linear "
        "(k times, Goyal et al. 2017), sqrt (by the square root of k) or none; default: "
        "%(default)s",
    )
    group.add_argument(
        "--warmup-epochs",
        type=epochs,
        default=0.0,
        metavar="E",
        help="ramp the learning rate from the base to the scaled rate over the first E epochs; "
        "default: %(default)g",
    )
    group.add_argument(
        "--target",
        type=target,
        metavar="METRIC=VALUE",
        help="report when each run first reached it, e.g. val_accuracy=0.9 (direction from the "
        "name) or val_loss<=0.3; default: none",
    )
    group.add_argument(
        "--deterministic",
        action="store_true",
        help="TensorFlow's op determinism: the same seed gives the same curve",
    )


def _add_output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="do not draw a progress bar per run (on stderr)",
    )
    parser.add_argument("--log", metavar="PATH", help=_LOG_HELP)
