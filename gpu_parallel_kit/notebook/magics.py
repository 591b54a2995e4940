"""The `%gpk` line magic: devices, run, compare, panel, history, virtual, plan, search and
calibrate, as in the CLI.

Each sub-command is a small function with its own `magic_arguments` parser: it parses, builds a
`Request` (or calls the API directly), and displays what comes back. A bad argument or a plan the
kit refuses is raised as IPython's `UsageError` carrying the kit's one sentence, so the user sees
one line instead of a traceback. Nothing here imports TensorFlow: devices are listed by a worker.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ..api import Experiment
from ..errors import GpkError, one_sentence
from ..options.argtypes import positive
from ..options.request import Request
from ..options.table import progress_of
from ..runs.description.device_choice import list_devices, virtual_device_limit
from ..runs.description.sources import model_source
from ..store import history as run_history
from .names import resolve_model
from .options import (
    calibrate_options,
    compare_options,
    help_option,
    history_options,
    plan_options,
    projection_options,
    request_from,
    run_options,
    search_options,
    training,
)
from .views import ShownComparison, show_run

Handler = Callable[[Any, argparse.Namespace], Any]


@magic_arguments("gpk devices")
@help_option
def devices(shell: Any, args: argparse.Namespace) -> Any:
    """List the devices runs can use (returns a DataFrame).

    The real GPUs, or without them virtual devices made from the CPU (see `%gpk virtual`).
    """
    return list_devices()


@magic_arguments("gpk virtual")
@help_option
@argument("count", nargs="?", type=positive, help="how many; without it, show the current limit")
def virtual(shell: Any, args: argparse.Namespace) -> None:
    """Show or set how many virtual devices are offered without GPUs.

    Sets GPK_MAX_VIRTUAL for this kernel; the kit reads it at each call.
    """
    if args.count is not None:
        os.environ["GPK_MAX_VIRTUAL"] = str(args.count)
    print(
        f"Up to {virtual_device_limit()} virtual devices are offered when GPUs are missing "
        "(GPK_MAX_VIRTUAL); they share this machine's cores and memory."
    )


@magic_arguments("gpk run")
@help_option
@training
@run_options
def run(shell: Any, args: argparse.Namespace) -> Any:
    """Train once under one strategy (returns the RunResult).

    Shows the run's row, and its pipeline chart for strategy pipeline. Example, in a cell::

        r = %gpk run build_model --data x y --strategy pipeline --devices 2 --micro-batches 4
    """
    request = request_from(args, shell.user_ns)
    experiment = _experiment(request, progress=args.progress)
    result = experiment.run(args.strategy, args.devices, **request.plan())
    show_run(result)
    return result


@magic_arguments("gpk compare")
@help_option
@training
@compare_options
@projection_options
def compare(shell: Any, args: argparse.Namespace) -> Any:
    """Run every strategy on every device count (returns the Comparison).

    `single` runs once, on one device: the baseline of speedup. Shows the table and the plots
    of wall time, throughput and speedup. Example, in a cell::

        cmp = %gpk compare build_model --data x y --strategies single data pipeline \
            --devices 1 2 4
    """
    request = request_from(args, shell.user_ns)
    experiment = _experiment(request, progress=progress_of(args))
    comparison = experiment.compare(
        args.strategies,
        args.devices,
        rounds=args.rounds,
        measure_s=args.measure_s,
        **request.plan(),
    )
    if not any(r.status == "cancelled" for r in comparison.results):
        comparison = request.projected(comparison)
    shown = ShownComparison(comparison.results)
    shown.show()
    if args.out:
        paths = shown.save_report(args.out)
        print(f"Report written to {args.out}: {', '.join(os.path.basename(p) for p in paths)}")
    return shown


@magic_arguments("gpk panel")
@help_option
@training
@projection_options
def panel(shell: Any, args: argparse.Namespace) -> Any:
    """Open a panel to pick devices and strategies, then run or compare (returns the Panel).

    Training runs in the background: the notebook stays usable, and Stop cancels. The options
    set the panel's starting values. Example, in a cell::

        %gpk panel build_model --data x y
    """
    from .panel import Panel  # ipywidgets only when a panel is asked for

    request = request_from(args, shell.user_ns)
    _checked_model(request)
    request.check_projection()
    shown = Panel(request, title=_title(args))
    shown.show()
    return shown


@magic_arguments("gpk history")
@help_option
@history_options
def history(shell: Any, args: argparse.Namespace) -> Any:
    """The runs in the run log, oldest first, one row per configuration (returns a DataFrame).

    A comparison's rounds are merged into one row (`--per-round`: a row for each); speedup is
    computed within each experiment; the log survives kernel restarts.
    """
    table = run_history(args.log, per_round=args.per_round)
    return table.tail(args.limit) if args.limit else table


@magic_arguments("gpk plan")
@help_option
@plan_options
def plan(shell: Any, args: argparse.Namespace) -> Any:
    """Memory per device of a model too large to build here, per strategy (returns a DataFrame).

    Modelled, nothing trained (gpk.plan_memory; ZeRO, SC 2020). Example, in a cell::

        %gpk plan --params 7e9 --devices 8 64 --gpu h100
    """
    from ..options.plan import planned  # noqa: PLC0415

    return planned(args)


@magic_arguments("gpk search")
@help_option
@search_options
def search(shell: Any, args: argparse.Namespace) -> Any:
    """Which data × fsdp × tensor × pipeline plan fits a cluster and is fastest (returns Plans).

    The step is counted once for one sample, without allocating the weights, and kept for later
    searches (gpk.search). `--inputs` names one sample in this notebook, or gives its shapes
    (token_ids=2048:int32 padding_mask=2048:int32). Example, in a cell::

        %gpk search build_gpt --inputs sample --device a100 --nodes 16 --global-batch 512

    With `--run-here RANK` (or `--compare-here N`) and `--data X Y`, the plan of that rank (or
    the N leading ones) then runs here, scaled down (`Experiment.run_plan`,
    `compare_plans`), and the Comparison is returned, as the panel's plan tab runs them.
    """
    from ..options.search import (  # noqa: PLC0415
        experiment_here,
        keywords,
        ran_here,
        runs_here,
        sample_from_text,
    )
    from ..planning import search as search_plans  # noqa: PLC0415

    options = keywords(args)
    here = runs_here(args)
    names = args.inputs or []
    held = len(names) == 1 and names[0] in shell.user_ns
    sample = shell.user_ns[names[0]] if held else sample_from_text(names)
    model = resolve_model(args.model, shell.user_ns)
    if not here:
        return search_plans(model, sample, **options)
    from IPython.display import display  # noqa: PLC0415

    from .names import resolve_data  # noqa: PLC0415

    data = resolve_data(args.data, shell.user_ns)
    experiment = experiment_here(model, data, args)  # checked before the count
    plans = search_plans(model, sample, **options)
    display(plans)
    shown = ShownComparison(ran_here(plans, experiment, args).results)
    shown.show()
    return shown


@magic_arguments("gpk calibrate")
@help_option
@calibrate_options
def calibrate(shell: Any, args: argparse.Namespace) -> Any:
    """Measure the devices at hand for the cost model (returns a DeviceCalibration).

    Times products, elementwise chains, a call and the collectives plans use, every device
    busy at once (gpk.calibrate; a minute by default), and with --model the model's own step;
    shows a row per count of busy devices and the measured curves, and keeps the calibration
    where runs and comparisons of the same devices find it. Example, in a cell::

        cal = %gpk calibrate --backend jax --model build_model --budget 30
    """
    from IPython.display import display  # noqa: PLC0415

    from ..api import calibrate as calibrate_devices  # noqa: PLC0415
    from ..options.calibrate import keywords  # noqa: PLC0415

    options = keywords(args)
    if options["model"] is not None:
        options["model"] = resolve_model(options["model"], shell.user_ns)
    calibration = calibrate_devices(**options)
    display(calibration.summary())
    display(calibration.plot())
    return calibration


COMMANDS: dict[str, Handler] = {
    "devices": devices,
    "run": run,
    "compare": compare,
    "panel": panel,
    "history": history,
    "virtual": virtual,
    "plan": plan,
    "search": search,
    "calibrate": calibrate,
}


def _experiment(request: Request, progress: bool | str) -> Experiment:
    """The API's Experiment; its wrong-type errors (a built model instead of a builder, a dict
    as data) are the user's to fix, so they are one line too, as in the CLI."""
    try:
        return request.experiment(progress)
    except TypeError as error:
        raise UsageError(one_sentence(error)) from None


def _checked_model(request: Request) -> None:
    """A panel is opened before anything runs: refuse a model that could never run, now."""
    try:
        model_source(request.model)
    except TypeError as error:
        raise UsageError(one_sentence(error)) from None


def _title(args: argparse.Namespace) -> str:
    data = " ".join(args.data) if args.data else "its own data"
    return f"{args.model} on {data}"


@magics_class
class GpkMagics(Magics):
    """Holds `%gpk`; IPython instantiates it with the shell when the extension loads."""

    @magic_arguments("gpk")
    @argument("command", choices=list(COMMANDS), metavar="COMMAND", help="see Commands below")
    @argument("arguments", nargs=argparse.REMAINDER, help="the command's own arguments")
    @line_magic
    def gpk(self, line: str) -> Any:
        """Try data- and model-parallel training of a Keras model from this notebook.

        %gpk devices
        cmp = %gpk compare build_model --data x y --strategies single data model --devices 1 2 4
        %gpk panel build_model --data x y

        Names (build_model, x, y) are looked up in the notebook; built-in models (mlp, cnn,
        transformer) and data sets (tabular, images, tokens) work too. Every run trains in a
        fresh worker process; the notebook never imports TensorFlow. `%gpk COMMAND --help`
        shows one command's options.
        """
        if not line.strip():
            print(GpkMagics.gpk.__doc__)
            return None
        args = parse_argstring(GpkMagics.gpk, line)
        handler = COMMANDS[args.command]
        options = handler.parser.parse_args(args.arguments)
        if options.help:
            print(handler.__doc__)
            return None
        try:
            return handler(self.shell, options)
        except GpkError as error:
            raise UsageError(one_sentence(error)) from None


def _overview() -> str:
    """`%gpk?`: the magic's help, then one line per command (its options: `--help`)."""
    lines = [
        f"  {name:<8} {handler.parser.description.strip().splitlines()[0]}"
        for name, handler in COMMANDS.items()
    ]
    return f"{GpkMagics.gpk.__doc__}\nCommands:\n" + "\n".join(lines) + "\n"


GpkMagics.gpk.__doc__ = _overview()
