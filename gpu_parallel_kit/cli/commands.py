"""The `gpk` command: list devices, run or compare strategies, run the demo, show the run log.

A thin front end over the API (front ends never train). Parsing is separate from execution:
`build_parser` only describes the options (most of them generated from `options.table`),
`_request` reads them into a `Request`, whose `experiment()` the API validates, and each `_cmd_*`
handler calls the API and prints what comes back. Every mistake is one line on stderr
(`gpk: error: ...`) with exit status 2, raised before any worker starts; Ctrl-C prints the runs
that finished and exits with 130.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import threading
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..analysis.tables.comparison_table import comparison_table, format_table
from ..api import Experiment
from ..comparison import Comparison
from ..errors import GpkError, one_sentence
from ..options.request import Request, request_from
from ..options.table import progress_of
from ..runs.description.device_choice import list_devices
from ..runs.description.synthetic_data import SYNTHETIC_SETS
from ..store import RunLog
from . import demo
from .launch import warm_each
from .parser import UsageError, build_parser

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `gpk`; returns the exit status instead of exiting, for in-process use."""
    try:
        args = build_parser(HANDLERS).parse_args(argv)
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
    print(f"gpk: error: {one_sentence(error)}", file=sys.stderr)
    return EXIT_USAGE


# ---- from options to API objects -------------------------------------------------------------


def _request(args: argparse.Namespace) -> Request:
    """What the options ask for: the model and data in the command line's forms, the training
    options through the option table's one mapping."""
    validation = args.validation_split
    if args.validation_data is not None:
        validation = _load_npz(Path(args.validation_data), "--validation-data")
    return request_from(args, _model(args.model), _data(args.data, args.model), validation)


def _experiment(request: Request, progress: bool | str) -> Experiment:
    """The Experiment asked for; every mistake in the options is raised here, as one line."""
    try:
        return request.experiment(progress)
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
            f"--data {text!r} is neither a built-in set ({sets}) "
            "nor a .npz file with arrays x and y"
        )
    return _load_npz(Path(text))


def _load_npz(path: Path, option: str = "--data") -> tuple[Any, Any]:
    import numpy as np

    if not path.is_file():
        raise UsageError(f"{option} '{path}' does not exist; give a .npz file with arrays x and y")
    try:
        with np.load(path, allow_pickle=False) as saved:
            missing = [key for key in ("x", "y") if key not in saved.files]
            if missing:
                raise UsageError(
                    f"{option} '{path}' holds {', '.join(saved.files) or 'no arrays'} but no "
                    f"{missing[0]!r}; save it with numpy.savez(path, x=inputs, y=targets)"
                )
            return saved["x"], saved["y"]
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        raise UsageError(f"{option} '{path}' is not a readable .npz file ({error})") from None


# ---- execution: one small handler per command ------------------------------------------------


def _no_command(args: argparse.Namespace) -> int:
    raise UsageError(
        "choose a command: devices, run, compare, demo, history, plan, search or worker (see gpk "
        "--help)"
    )


def _cmd_devices(args: argparse.Namespace) -> int:
    devices = list_devices()
    shown = devices.assign(
        memory_bytes=[_mib(value) for value in devices["memory_bytes"]],
        virtual=["yes" if value else "no" for value in devices["virtual"]],
    ).rename(columns={"memory_bytes": "memory_mib"})
    print(shown.to_string(index=False))
    return 0


def _mib(value: Any) -> str:
    return "" if value is None or value != value else f"{value / 2**20:,.0f}"


def _warm_for(args: argparse.Namespace) -> None:
    """Start the asked backends' servers while the data is read and the runs are planned."""
    asked = getattr(args, "backend", None) or [None]
    warm_each(asked if isinstance(asked, list | tuple) else [asked])


def _cmd_run(args: argparse.Namespace) -> int:
    _warm_for(args)
    request = _request(args)
    experiment = _experiment(request, args.progress)
    try:  # a plan the API refuses is a GpkError, raised before any worker starts
        result = experiment.run(args.strategy, args.devices, **request.plan())
    except KeyboardInterrupt:
        return _interrupted(experiment)
    print(format_table(comparison_table([result])))
    return 0 if result.ok else 1


def _cmd_compare(args: argparse.Namespace) -> int:
    _warm_for(args)
    request = _request(args)
    experiment = _experiment(request, progress_of(args))
    plan = {**request.plan(), "rounds": args.rounds, "measure_s": args.measure_s}
    return _compare(experiment, args.strategies, args.devices, plan, args.out, request.projected)


def _cmd_demo(args: argparse.Namespace) -> int:
    backend = demo.demo_backend(args.backend)
    warm_each([backend])
    experiment = demo.demo_experiment(progress=progress_of(args), log=args.log, backend=backend)
    print(demo.describe(experiment), flush=True)
    experiment.count_ahead()  # the projection's count, beside the servers' start
    plan = {"measure_s": demo.MEASURE_S}
    return _compare(
        experiment, demo.STRATEGIES, demo.DEVICES, plan, args.out, extend=demo.with_projection
    )


def _cmd_worker(args: argparse.Namespace) -> int:
    from ..cluster.config import load_cluster
    from ..cluster.serve import serve

    cluster = load_cluster(args.cluster)
    return serve(cluster, args.index, args.join_timeout, args.once, say=_say)


def _say(line: str) -> None:
    print(f"gpk worker: {line}", flush=True)


def _cmd_plan(args: argparse.Namespace) -> int:
    from ..analysis.cost_model.memory_plan import format_plan
    from ..options.plan import planned

    print(format_plan(planned(args)))
    return 0


def _cmd_search(args: argparse.Namespace) -> int:
    from ..options.search import experiment_here, keywords, ran_here, runs_here, sample_from_text
    from ..planning import search

    options = keywords(args)  # the cluster, batch and sample checked before any import
    sample = sample_from_text(args.inputs)
    model = _model(args.model)
    here = runs_here(args)
    # the runs here checked before the count: their data and the experiment's settings
    experiment = experiment_here(model, _data(args.data, args.model), args) if here else None
    plans = search(model, sample, **options)
    print(plans.text(args.top))
    if experiment is None:
        return 0
    try:
        ran = ran_here(plans, experiment, args)
    except KeyboardInterrupt:
        return _interrupted(experiment)
    print(ran)
    return 0 if {result.status for result in ran.results} == {"ok"} else 1


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from ..api import calibrate
    from ..options.calibrate import keywords

    options = keywords(args)
    if options["model"] is not None:
        options["model"] = _model(options["model"])
    calibration = calibrate(**options)
    print(calibration.label)
    print(calibration.summary().to_string())
    if calibration.path:
        print(
            f"Kept in {calibration.path}: runs and comparisons of these devices use the newest; "
            "gpk.DeviceCalibration.load(path) reads it."
        )
    return 0


def _cmd_history(args: argparse.Namespace) -> int:
    log = RunLog(args.log)
    table = log.table(per_round=args.per_round)
    shown = table.tail(args.limit) if args.limit else table
    rows = "runs" if args.per_round else "configurations"
    print(f"{len(shown)} of {len(table)} {rows} in {log.path}")
    print(format_table(shown))
    return 0


def _compare(
    experiment: Experiment,
    strategies: Sequence[str],
    devices: Sequence[int],
    plan: dict[str, Any],
    out: str | None,
    extend: Callable[[Comparison], Comparison] | None = None,
) -> int:
    """Run the grid, print the table, write the report; Ctrl-C keeps and prints what finished.
    `extend` adds rows to the finished comparison (a projection)."""
    if out is not None:
        _import_meanwhile(REPORT_IMPORTS)
    try:
        comparison = experiment.compare(strategies, devices, **plan)
    except KeyboardInterrupt:
        return _interrupted(experiment)
    measured = {result.status for result in comparison.results}
    if extend is not None and "cancelled" not in measured:
        comparison = extend(comparison)
    print(comparison)  # the table and the advice sentence under it
    statuses = {result.status for result in comparison.results}
    if "cancelled" in statuses:  # compare() turns Ctrl-C into cancelled rows
        print("gpk: interrupted; no report written", file=sys.stderr)
        return EXIT_INTERRUPTED
    if out is not None:
        print(f"Report written to {out}:")
        for path in comparison.save_report(out):
            print(f"  {path}")
    return 0 if statuses == {"ok"} else 1


# What writing a report imports beyond the kit (0.45 s on two cores): imported while the runs go
# on, as the caller only waits for its workers then. Only matplotlib's own modules, which nothing
# else in the caller imports meanwhile, so the two threads never wait on each other's imports.
REPORT_IMPORTS = ("matplotlib.figure", "matplotlib.backends.backend_agg")


def _import_meanwhile(modules: Sequence[str]) -> None:
    """Import `modules` in a background thread; a failure is left for the import that needs
    them to raise."""

    def load() -> None:
        with contextlib.suppress(Exception):
            for module in modules:
                importlib.import_module(module)

    threading.Thread(target=load, daemon=True, name="gpk-report-imports").start()


def _interrupted(experiment: Experiment) -> int:
    """After Ctrl-C: the experiment's rows already in the run log, then status 130."""
    finished = [r for r in experiment.log.results() if r.experiment_id == experiment.experiment_id]
    if finished:
        print(format_table(comparison_table(finished)))
    print(f"gpk: interrupted; the runs above are in {experiment.log.path}", file=sys.stderr)
    return EXIT_INTERRUPTED


HANDLERS = {
    "": _no_command,
    "devices": _cmd_devices,
    "run": _cmd_run,
    "compare": _cmd_compare,
    "demo": _cmd_demo,
    "history": _cmd_history,
    "calibrate": _cmd_calibrate,
    "plan": _cmd_plan,
    "search": _cmd_search,
    "worker": _cmd_worker,
}
