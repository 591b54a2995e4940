"""The training options of `gpk` and `%gpk`, written once: flag, type, default, help, and where the
value goes in the API.

Both front ends generate their parsers from these rows (`argparse` for `gpk`, IPython's
`magic_arguments`, argparse underneath, for `%gpk`): flags, types and defaults cannot drift apart.
Defaults are read from the API's signatures (`Experiment.__init__`, `plan`, `run`, `compare`).
What only one front end takes stays with it: the model and the data, named as files or
`module:function` on the command line and as the notebook's names in the magic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..api import Experiment
from ..runs.description.learning_rate_rules import LR_RULES
from ..runs.description.run_spec import ALL_REDUCE, MODES, SCALING, STRATEGIES
from ..runs.description.tuning_rules import TUNE
from ..strategies import BACKENDS, DEFAULT_COMPARISON, options, runnable, runnable_names
from .argtypes import amount, device_choice, epochs, positive, target, timeout, whole
from .flag import Flag

MIB = 2**20


def _run(name: str) -> Callable[..., Any]:
    return getattr(Experiment, name)


# Each strategy's options as its record lists them (a value with no text form, such as
# layout_map's patterns, is the API's alone).
STRATEGY_FLAGS: tuple[Flag, ...] = tuple(
    Flag.of_strategies(option) for option in options() if option.type is not None
)

BATCH_SIZE = Flag(
    "--batch-size",
    "global batch under strong scaling, per-device batch under weak scaling; it must split "
    "evenly over the devices; default: %(default)s",
    type=positive,
    metavar="N",
)

# What to train and how: shared by `run`, `compare` and (in the magic) `panel`.
TRAINING: tuple[Flag, ...] = (
    BATCH_SIZE,
    Flag("--epochs", "passes over the data; default: %(default)s", type=positive, metavar="N"),
    Flag(
        "--steps-per-epoch",
        "optimizer steps per epoch; default: as many full global batches as the data holds",
        type=positive,
        metavar="N",
    ),
    Flag(
        "--seed",
        "seed of the weights, data and batch order; default: %(default)s",
        type=whole,
        metavar="N",
    ),
    Flag(
        "--scaling",
        "strong: the global batch stays the same on more devices; weak: each device's batch "
        "stays the same; default: %(default)s",
        choices=SCALING,
    ),
    Flag(
        "--mode",
        "fit: Keras model.fit; explicit: a custom training loop whose gradient all-reduce is "
        "visible and timed; default: fit, and explicit for multiworker (its only loop)",
        goes_to="plan",
        choices=MODES,
    ),
    Flag(
        "--all-reduce",
        "how data parallel runs sum gradients across devices (nccl needs GPUs); "
        "default: %(default)s",
        goes_to="plan",
        choices=ALL_REDUCE,
    ),
    *STRATEGY_FLAGS,
    Flag(
        "--memory-budget",
        "refuse a run whose parameters, gradients, optimizer state and activations need more "
        "than this many MiB on any device (why a model must be split); default: no budget",
        goes_to="plan",
        type=positive,
        metavar="MIB",
        scale=MIB,
    ),
    Flag(
        "--timeout",
        "stop a run that has not finished after this long (none: no limit); default: %(default)g",
        type=timeout,
        metavar="SECONDS",
    ),
    Flag(
        "--log",
        "the run log file; default: $GPK_LOG, else gpk_runs.sqlite in the current folder",
        metavar="PATH",
    ),
    Flag(
        "--validation-every-steps",
        "evaluate every N optimizer steps (and after the last); default: each epoch end",
        type=positive,
        metavar="N",
    ),
    Flag(
        "--lr-scaling",
        "scale the learning rate when the global batch grows by k (weak scaling): linear "
        "(k times, Goyal et al. 2017), sqrt (by the square root of k) or none; "
        "default: %(default)s",
        choices=LR_RULES,
    ),
    Flag(
        "--warmup-epochs",
        "ramp the learning rate from the base to the scaled rate over the first E epochs; "
        "default: %(default)g",
        type=epochs,
        metavar="E",
    ),
    Flag(
        "--target",
        "report when each run first reached it, e.g. val_accuracy=0.9 (direction from the "
        "name) or val_loss<=0.3; default: none",
        type=target,
        metavar="METRIC=VALUE",
    ),
    Flag(
        "--deterministic",
        "TensorFlow's op determinism: the same seed gives the same curve",
        action="store_true",
    ),
    Flag(
        "--backend",
        "tensorflow (tf.distribute) or jax (Keras's own keras.distribution, which has tensor "
        "parallelism); compare takes both, for one table; default: tensorflow",
        goes_to="plan",
        nargs="+",
        choices=BACKENDS,
        metavar="BACKEND",
    ),
    Flag(
        "--tune",
        "auto: the worker picks steps per execution, XLA and the input pipeline's prefetch by "
        "rules, and the row records them; off: Keras's defaults; default: %(default)s",
        choices=TUNE,
    ),
    Flag(
        "--steps-per-execution",
        "optimizer steps per compiled call of fit (wins over --tune); default: tune's choice",
        goes_to="plan",
        type=positive,
        metavar="N",
    ),
    Flag(
        "--no-measure-comm",
        "skip the communication measurement after training (data parallel): a cheaper run "
        "whose row says communication was not measured",
        action="store_false",
        dest="measure_comm",
    ),
)

PROGRESS = Flag(
    "--no-progress",
    "show no progress: no bar for a run, no line per configuration of a comparison",
    goes_to="front end",
    action="store_false",
    dest="progress",
    default=True,
)

VERBOSE = Flag(
    "--verbose",
    "a progress line for every round of a comparison, instead of one line per configuration "
    "updated as its rounds finish",
    goes_to="front end",
    action="store_true",
    default=False,
)

# Each strategy as its record says it, and the backend it needs when only one offers it.
_STRATEGY_HELP = "; ".join(
    f"{r.name}{' (alias ' + ', '.join(r.aliases) + ')' if r.aliases else ''}: {r.summary}"
    + (f" (--backend {next(iter(r.worker_classes))})" if len(r.worker_classes) == 1 else "")
    for r in runnable()
)

# `run`: one strategy on one device choice.
RUN: tuple[Flag, ...] = (
    Flag(
        "--strategy",
        f"how to spread training over the devices: {_STRATEGY_HELP}; default: %(default)s",
        goes_to="front end",
        choices=STRATEGIES,
        api_call=_run("run"),
    ),
    Flag(
        "--devices",
        "a device count like 2, or device indices like 0,1 (see devices); default: %(default)s",
        goes_to="front end",
        type=device_choice,
        metavar="N|I,J",
        api_call=_run("run"),
    ),
    PROGRESS,
)

# `compare`: every strategy on every device count.
COMPARE: tuple[Flag, ...] = (
    Flag(
        "--strategies",
        f"strategies to compare, from {', '.join(runnable_names())}; default: "
        + " ".join(DEFAULT_COMPARISON),
        goes_to="front end",
        nargs="+",
        choices=STRATEGIES,
        metavar="STRATEGY",
        api_call=_run("compare"),
    ),
    Flag(
        "--devices",
        "device counts to compare; default: 1 2 4",
        goes_to="front end",
        nargs="+",
        type=positive,
        metavar="N",
        api_call=_run("compare"),
    ),
    Flag(
        "--rounds",
        "times the grid runs, interleaved, for each row's median and 95 %% interval; "
        "default: 3 (2 with GPK_QUICK=1, or $GPK_ROUNDS)",
        goes_to="front end",
        type=positive,
        metavar="N",
        default=None,
    ),
    Flag(
        "--measure-s",
        "seconds of rounds each row may take while its step is not yet known (its 95 %% "
        "interval wider than 1.25x); default: 6, or $GPK_MEASURE_S; fixed --rounds measure no more",
        goes_to="front end",
        type=amount,
        metavar="S",
        default=None,
    ),
    Flag(
        "--out",
        "folder for the report (table.csv, table.md and the figures as PNG); none unless given",
        goes_to="front end",
        metavar="DIR",
        default=None,
    ),
    PROGRESS,
    VERBOSE,
)


# `history`: the run log.
HISTORY: tuple[Flag, ...] = (
    Flag(
        "--limit",
        "show only the last N runs; default: all",
        goes_to="front end",
        type=positive,
        metavar="N",
        default=None,
    ),
    Flag(
        "--per-round",
        "one row per run, each round of a comparison on its own; default: one row per "
        "configuration, its rounds merged",
        goes_to="front end",
        action="store_true",
        default=False,
    ),
    next(option for option in TRAINING if option.name == "log"),
)


def progress_of(parsed: Any) -> bool | str:
    """The API's `progress=` a parsed command line asks for: False, "rounds" or True."""
    if not parsed.progress:
        return False
    return "rounds" if getattr(parsed, "verbose", False) else True


def training_values(parsed: Any) -> dict[str, Any]:
    """The training options of a parsed command line, keyed by name, in the API's units."""
    return {option.name: option.to_api(getattr(parsed, option.name)) for option in TRAINING}


def api_arguments(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Training values (API units, keyed by name) as (Experiment keyword arguments, run/compare
    keyword arguments): the one mapping of options onto the API, for every front end."""
    experiment: dict[str, Any] = {}
    plan: dict[str, Any] = {}
    for option in TRAINING:
        (experiment if option.goes_to == "experiment" else plan)[option.name] = values[option.name]
    return experiment, plan


def api_default(name: str) -> Any:
    """The API's default of the training option `name`."""
    return next(option.api_default for option in TRAINING if option.name == name)
