"""The `gpk` command: list devices, run or compare strategies, run the demo, show the run log.

A thin front end over the API (DESIGN.md: front ends never train). Parsing is separate from
execution: `build_parser` only describes the options, `_experiment` turns them into an
`Experiment` (which validates them), and each `_cmd_*` handler calls the API and prints what comes
back. Every mistake is one line on stderr (`gpk: error: ...`) with exit status 2, raised before any
worker starts; Ctrl-C prints the runs that finished and exits with 130.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .api import DEFAULT_TIMEOUT_S, Experiment
from .errors import GpkError
from .spec import ALL_REDUCE, MODES, SCALING, STRATEGIES  # the API's own choices, for the help
from .synthetic import SYNTHETIC_SETS

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C


class UsageError(Exception):
    """A bad command line; main prints the message alone, without argparse's usage block."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `gpk`; returns the exit status instead of exiting, for in-process use."""
    try:
        args = build_parser().parse_args(argv)
    except UsageError as error:
        return _usage_error(error)
    except SystemExit as done:  # --help and --version exit through argparse
        return done.code if isinstance(done.code, int) else 0
    try:
        return args.handler(args)
    except (GpkError, UsageError) as error:
        return _usage_error(error)
    except KeyboardInterrupt:
        print("gpk: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _usage_error(error: Exception) -> int:
    print(f"gpk: error: {' '.join(str(error).split())}", file=sys.stderr)
    return EXIT_USAGE


# ---- parsing ----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gpk",
        description="Compare data-parallel training strategies of a Keras model on real GPUs or "
        "on virtual devices carved out of the CPU. Every run trains in a fresh worker process "
        "and is appended to the run log (./gpk_runs.sqlite, or $GPK_LOG).",
        epilog="Run 'gpk COMMAND --help' for the options of a command.",
    )
    parser.set_defaults(handler=_no_command)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    training = _training_options()
    _add(
        commands,
        "devices",
        _cmd_devices,
        "list the devices runs can use",
        "List the devices a run can use: the real GPUs, or, without GPUs, the virtual devices "
        "carved out of the CPU (GPK_MAX_VIRTUAL sets how many).",
    )
    run = _add(
        commands,
        "run",
        _cmd_run,
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
        help="how to spread training over the devices: single (one device) or data (replicas "
        "with an all-reduce of the gradients); default: %(default)s",
    )
    run.add_argument(
        "--devices",
        type=_device_choice,
        default=1,
        metavar="N|I,J",
        help="a device count like 2, or device indices like 0,1 (see 'gpk devices'); "
        "default: %(default)s",
    )
    compare = _add(
        commands,
        "compare",
        _cmd_compare,
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
        default=list(STRATEGIES),
        metavar="STRATEGY",
        help=f"strategies to compare, from {', '.join(STRATEGIES)}; default: {' '.join(STRATEGIES)}",
    )
    compare.add_argument(
        "--devices",
        nargs="+",
        type=_whole,
        default=[1, 2, 4],
        metavar="N",
        help="device counts to compare; default: 1 2 4",
    )
    compare.add_argument("--out", metavar="DIR", help=_OUT_HELP + "; none unless given")
    demo = _add(
        commands,
        "demo",
        _cmd_demo,
        "compare single and data parallel on the built-in MLP",
        "Compare single-device and data parallel training of the built-in MLP on 1, 2 and 4 "
        "devices (virtual ones when GPUs are missing), print the table and write a report. "
        "About half a minute on a 2-core CPU; GPK_QUICK=1 makes it shorter.",
    )
    demo.add_argument("--out", metavar="DIR", default="gpk_report", help=_OUT_HELP + "; default: %(default)s")
    _add_output_options(demo)
    history = _add(
        commands,
        "history",
        _cmd_history,
        "show the runs in the run log",
        "Show the runs in the run log, oldest first; speedup is computed within each experiment.",
    )
    history.add_argument(
        "--limit", type=_positive, metavar="N", help="show only the last N runs; default: all"
    )
    history.add_argument("--log", metavar="PATH", help=_LOG_HELP)
    return parser


_OUT_HELP = "folder for the report (table.csv, table.md, wall_time.png, throughput.png, speedup.png)"
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
        type=_whole,
        default=256,
        metavar="N",
        help="global batch under strong scaling, per-device batch under weak scaling; it must "
        "split evenly over the devices; default: %(default)s",
    )
    options.add_argument(
        "--epochs", type=_whole, default=1, metavar="N", help="passes over the data; default: %(default)s"
    )
    options.add_argument(
        "--steps-per-epoch",
        type=_whole,
        metavar="N",
        help="optimizer steps per epoch; default: as many full global batches as the data holds",
    )
    options.add_argument(
        "--seed",
        type=_whole,
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
        default="fit",
        help="fit: Keras model.fit; explicit: a custom training loop whose gradient all-reduce "
        "is visible and timed; default: %(default)s",
    )
    options.add_argument(
        "--all-reduce",
        choices=ALL_REDUCE,
        default="auto",
        help="how data parallel runs sum gradients across devices (nccl needs GPUs); "
        "default: %(default)s",
    )
    options.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="stop a run that has not finished after this long; default: %(default)g",
    )
    _add_output_options(options)
    return options


def _add_output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="do not draw a progress bar per run (on stderr)",
    )
    parser.add_argument("--log", metavar="PATH", help=_LOG_HELP)


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _positive(text: str) -> int:
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive whole number")
    return value


def _device_choice(text: str) -> int | list[int]:
    """'2' is a count; '0,1' (or '1,' for one index) are device indices."""
    try:
        if "," not in text:
            return int(text)
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a count like 2 or indices like 0,1"
        ) from None


# ---- from options to API objects -------------------------------------------------------------


def _experiment(args: argparse.Namespace):
    """The Experiment the options describe; every mistake in them is raised here, as one line."""
    try:
        return Experiment(
            model=_model(args.model),
            data=_data(args.data, args.model),
            batch_size=args.batch_size,
            epochs=args.epochs,
            steps_per_epoch=args.steps_per_epoch,
            seed=args.seed,
            scaling=args.scaling,
            timeout=args.timeout,
            log=args.log,
            progress=args.progress,
        )
    except TypeError as error:  # the API's wrong-type errors are the user's to fix here
        raise UsageError(str(error)) from error


def _model(text: str) -> Any:
    """A built-in name or .keras path as is (the API checks them); module:function imported."""
    if ":" not in text or text.endswith(".keras"):
        return text
    module_name, _, attribute = text.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"--model {text!r} must look like module:function, e.g. mymodels:build")
    here = os.getcwd()
    if here not in sys.path:
        # Like `python -m`: a builder module next to the user is importable, in the workers too
        # (they inherit sys.path).
        sys.path.insert(0, here)
    try:
        builder: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise UsageError(
            f"--model {text!r}: cannot import {module_name!r} ({error}); run gpk from the folder "
            "that holds it or add that folder to PYTHONPATH"
        ) from None
    for part in attribute.split("."):
        if not hasattr(builder, part):
            raise UsageError(f"--model {text!r}: {module_name} has no {attribute!r}")
        builder = getattr(builder, part)
    if not callable(builder):
        raise UsageError(
            f"--model {text!r} is a {type(builder).__name__}, not a function that builds a model"
        )
    return builder


def _data(text: str | None, model: str) -> Any:
    """None (the built-in model's own set), a built-in set name, or (x, y) from a .npz file."""
    sets = ", ".join(SYNTHETIC_SETS)
    if text is None:
        if ":" in model or model.endswith(".keras"):
            raise UsageError(
                f"--data is needed for --model {model!r}; give a built-in set ({sets}) or a .npz "
                "file with arrays x and y"
            )
        return None
    if text in SYNTHETIC_SETS:
        return text
    if not text.endswith(".npz"):
        raise UsageError(
            f"--data {text!r} is neither a built-in set ({sets}) nor a .npz file with arrays x and y"
        )
    return _load_npz(Path(text))


def _load_npz(path: Path) -> tuple[Any, Any]:
    import numpy as np

    if not path.is_file():
        raise UsageError(f"--data '{path}' does not exist; give a .npz file with arrays x and y")
    try:
        with np.load(path, allow_pickle=False) as saved:
            missing = [key for key in ("x", "y") if key not in saved.files]
            if missing:
                raise UsageError(
                    f"--data '{path}' holds {', '.join(saved.files) or 'no arrays'} but no "
                    f"{missing[0]!r}; save it with numpy.savez(path, x=inputs, y=targets)"
                )
            return saved["x"], saved["y"]
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        raise UsageError(f"--data '{path}' is not a readable .npz file ({error})") from None


def _plan(args: argparse.Namespace) -> dict[str, Any]:
    return {"mode": args.mode, "all_reduce": args.all_reduce}


# ---- execution: one small handler per command ------------------------------------------------


def _no_command(args: argparse.Namespace) -> int:
    raise UsageError("choose a command: devices, run, compare, demo or history (see gpk --help)")


def _cmd_devices(args: argparse.Namespace) -> int:
    from .devices import list_devices

    devices = list_devices()
    shown = devices.drop(columns=["memory_bytes"]).assign(
        memory_mib=[_mib(value) for value in devices["memory_bytes"]],
        virtual=["yes" if value else "no" for value in devices["virtual"]],
    )
    print(shown.to_string(index=False))
    return 0


def _mib(value: Any) -> str:
    return "" if value is None or value != value else f"{value / 2**20:,.0f}"


def _cmd_run(args: argparse.Namespace) -> int:
    from .tables import comparison_table, format_table

    experiment = _experiment(args)
    experiment.plan(args.strategy, args.devices, **_plan(args))  # validate before any worker
    try:
        result = experiment.run(args.strategy, args.devices, **_plan(args))
    except KeyboardInterrupt:
        return _interrupted(experiment)
    print(format_table(comparison_table([result])))
    return 0 if result.ok else 1


def _cmd_compare(args: argparse.Namespace) -> int:
    experiment = _experiment(args)
    return _compare(experiment, args.strategies, args.devices, _plan(args), args.out)


def _cmd_demo(args: argparse.Namespace) -> int:
    from . import demo

    experiment = demo.demo_experiment(progress=args.progress, log=args.log)
    print(demo.describe(experiment), flush=True)
    return _compare(experiment, demo.STRATEGIES, demo.DEVICES, {}, args.out)


def _cmd_history(args: argparse.Namespace) -> int:
    from .store import RunLog
    from .tables import format_table

    log = RunLog(args.log)
    table = log.table()
    shown = table.tail(args.limit) if args.limit else table
    print(f"{len(shown)} of {len(table)} runs in {log.path}")
    print(format_table(shown))
    return 0


def _compare(experiment, strategies, devices, plan: dict[str, Any], out: str | None) -> int:
    """Run the grid, print the table, write the report; Ctrl-C keeps and prints what finished."""
    from .tables import format_table

    try:
        comparison = experiment.compare(strategies, devices, **plan)
    except KeyboardInterrupt:
        return _interrupted(experiment)
    print(format_table(comparison.table))
    statuses = {result.status for result in comparison.results}
    if "cancelled" in statuses:  # compare() turns Ctrl-C into cancelled rows
        print("gpk: interrupted; no report written", file=sys.stderr)
        return EXIT_INTERRUPTED
    if out is not None:
        print(f"Report written to {out}:")
        for path in comparison.save_report(out):
            print(f"  {path}")
    return 0 if statuses == {"ok"} else 1


def _interrupted(experiment) -> int:
    """After Ctrl-C: the experiment's rows already in the run log, then status 130."""
    from .tables import comparison_table, format_table

    finished = [r for r in experiment.log.results() if r.experiment_id == experiment.experiment_id]
    if finished:
        print(format_table(comparison_table(finished)))
    print(f"gpk: interrupted; the runs above are in {experiment.log.path}", file=sys.stderr)
    return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
