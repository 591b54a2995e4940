"""The `%gpk` options shared by `run`, `compare` and `panel`, named and checked like the CLI's.

Kept apart from the command handlers so each handler stays a few lines (STYLE.md item 7). The
options only say *what* was asked; `request_from` turns them into a `Request`, and the API checks
the values themselves.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import Any

from IPython.core.magic_arguments import argument

from ..api import DEFAULT_TIMEOUT_S
from ..argtypes import balance, epochs, positive, target, timeout, whole
from ..lr_rules import LR_RULES
from ..schedules import SCHEDULES
from ..spec import ALL_REDUCE, MODES, SCALING
from ..synthetic import SYNTHETIC_SETS
from .names import resolve_data, resolve_model, resolve_validation
from .request import MIB, Request

_SETS = ", ".join(SYNTHETIC_SETS)
# Source order: the help lists them in this order (decorators apply bottom-up, see `training`).
_TRAINING_OPTIONS = (
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
        "--batch-size", type=positive, default=256, metavar="N", help="global batch; default: 256"
    ),
    argument(
        "--epochs", type=positive, default=1, metavar="N", help="passes over the data; default: 1"
    ),
    argument(
        "--steps-per-epoch",
        type=positive,
        metavar="N",
        help="optimizer steps per epoch; default: all full global batches of the data",
    ),
    argument(
        "--seed",
        type=whole,
        default=0,
        metavar="N",
        help="seed of weights and batch order; default: 0",
    ),
    argument(
        "--scaling",
        choices=SCALING,
        default="strong",
        help="strong: same global batch on more devices; weak: same batch per device",
    ),
    argument(
        "--mode",
        choices=MODES,
        help="fit (model.fit) or explicit (loop); default: fit, explicit for multiworker",
    ),
    argument("--workers", type=positive, help="multiworker: local worker processes (default 2)"),
    argument("--cluster", metavar="FILE", help="multiworker: JSON file naming the hosts"),
    argument("--all-reduce", choices=ALL_REDUCE, default="auto", help="gradient reduction"),
    argument(
        "--schedule",
        choices=SCHEDULES,
        help="model parallel: naive, gpipe or 1f1b; default: naive, or gpipe with micro-batches",
    ),
    argument(
        "--micro-batches",
        type=positive,
        metavar="M",
        help="model parallel: micro-batches per batch",
    ),
    argument(
        "--balance",
        type=balance,
        default="params",
        metavar="params|time|I,J",
        help="model parallel: params, time, or layer indices where stages start (3,6)",
    ),
    argument(
        "--memory-budget",
        type=positive,
        metavar="MIB",
        help="refuse runs whose parameters and optimizer state exceed this many MiB per device",
    ),
    argument(
        "--timeout",
        type=timeout,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"stop a run after this long (none: no limit); default: {DEFAULT_TIMEOUT_S:g}",
    ),
    argument("--log", metavar="PATH", help="run log file; default: $GPK_LOG or gpk_runs.sqlite"),
    argument(
        "--validation",
        nargs="+",
        metavar="NAME|F",
        help="data to evaluate on during training: arrays in this notebook (--validation x_val "
        "y_val), one name holding them or a dataset builder, or a fraction of the training "
        "data (0.1); default: none",
    ),
    argument(
        "--validation-every-steps",
        type=positive,
        metavar="N",
        help="evaluate every N steps; default: at each epoch end",
    ),
    argument(
        "--lr-scaling",
        choices=LR_RULES,
        default="none",
        help="the learning rate when the global batch grows k times: linear (k×), sqrt or none",
    ),
    argument(
        "--warmup-epochs",
        type=epochs,
        default=0.0,
        metavar="E",
        help="ramp the rate from the base to the scaled one over E epochs; default: 0",
    ),
    argument(
        "--target",
        type=target,
        metavar="METRIC=VALUE",
        help="time to target per run, e.g. val_accuracy=0.9 or val_loss<=0.3",
    ),
    argument(
        "--deterministic",
        action="store_true",
        help="TensorFlow's op determinism: the same seed gives the same curve",
    ),
)
_HELP_OPTION = argument("-h", "--help", action="store_true", help="show this help")


def training(func: Callable) -> Callable:
    """Decorator: the model, data and training options of run, compare and panel."""
    for option in reversed(_TRAINING_OPTIONS):
        func = option(func)
    return func


def help_option(func: Callable) -> Callable:
    """Decorator: `-h/--help` prints the command's help (magic parsers have none of their own)."""
    return _HELP_OPTION(func)


def request_from(args: argparse.Namespace, namespace: Mapping[str, Any]) -> Request:
    """The Request the options describe, with names resolved in the notebook's namespace."""
    return Request(
        model=resolve_model(args.model, namespace),
        data=resolve_data(args.data, namespace),
        batch_size=args.batch_size,
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        seed=args.seed,
        scaling=args.scaling,
        timeout=args.timeout,
        mode=args.mode,
        all_reduce=args.all_reduce,
        schedule=args.schedule,
        micro_batches=args.micro_batches,
        balance=args.balance,
        memory_budget=None if args.memory_budget is None else args.memory_budget * MIB,
        workers=args.workers,
        cluster=args.cluster,
        log=args.log,
        validation=resolve_validation(args.validation, namespace),
        validation_every_steps=args.validation_every_steps,
        lr_scaling=args.lr_scaling,
        warmup_epochs=args.warmup_epochs,
        target=args.target,
        deterministic=args.deterministic,
    )
