"""gpu_parallel_kit: try data- and model-parallel training of your own Keras model.

Importing the kit does not import TensorFlow; `list_devices` imports it without starting its
runtime, and every run trains in a fresh worker process.
"""

from .analysis.memory_plan import plan_memory
from .api import Experiment
from .comparison import Comparison
from .errors import GpkError
from .runs.devices import list_devices
from .runs.results import RunResult
from .runs.rounds import merge_logged_rounds
from .store import RunLog, WorkCounts, history
from .version import __version__

__all__ = [
    "__version__",
    "Comparison",
    "Experiment",
    "GpkError",
    "RunResult",
    "history",
    "history_comparison",
    "list_devices",
    "plan_memory",
]


def history_comparison(path: str | None = None) -> Comparison:
    """Every run in the run log (the rows `history()` shows, a comparison's rounds merged into
    one row each) as a `Comparison`: its table,
    figures and projections. A projection reuses each experiment's step as the log counted it
    (`Comparison.project` from its Experiment counts it once); an experiment never counted is
    projected with measured compute, and its rows say so."""
    log = RunLog(path)
    return Comparison(merge_logged_rounds(log.results()), counter=WorkCounts(log).stored)


def load_ipython_extension(ipython) -> None:
    """`%load_ext gpu_parallel_kit`: registers the `%gpk` magics (TensorFlow stays unloaded in
    the kernel) and starts the default backend's server in the background, so the first run
    finds it ready."""
    from .notebook import load_ipython_extension as load
    from .runs.warm import warm

    load(ipython)
    warm()
