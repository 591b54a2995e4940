"""gpu_parallel_kit: try data- and model-parallel training of your own Keras model.

Importing the kit does not import TensorFlow; `list_devices` imports it without starting its
runtime, and every run trains in a fresh worker process.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .version import __version__

if TYPE_CHECKING:
    from .analysis.cost_model.device_calibration import DeviceCalibration
    from .analysis.cost_model.memory_plan import plan_memory
    from .api import Experiment, SlurmCluster, calibrate
    from .comparison import Comparison
    from .errors import GpkError
    from .planning import Plans, search
    from .runs.description.device_choice import list_devices
    from .runs.results.run_result import RunResult
    from .store import history

# Each public name from the module that defines it, imported when first asked for (PEP 562): a
# bare `import gpu_parallel_kit`, and `gpk` before it starts its server, stay light.
_LAZY = {
    "plan_memory": ".analysis.cost_model.memory_plan",
    "GPUCluster": ".analysis.cost_model.gpu_cluster",
    "DeviceCalibration": ".analysis.cost_model.device_calibration",
    "Experiment": ".api",
    "calibrate": ".api",
    "SlurmCluster": ".api",
    "Comparison": ".comparison",
    "GpkError": ".errors",
    "Plans": ".planning",
    "search": ".planning",
    "list_devices": ".runs.description.device_choice",
    "RunResult": ".runs.results.run_result",
    "history": ".store",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "__version__",
    "Comparison",
    "DeviceCalibration",
    "Experiment",
    "GPUCluster",
    "GpkError",
    "Plans",
    "RunResult",
    "SlurmCluster",
    "calibrate",
    "history",
    "history_comparison",
    "list_devices",
    "plan_memory",
    "search",
]


def history_comparison(path: str | None = None) -> Comparison:
    """Every run in the run log (the rows `history()` shows, a comparison's rounds merged into
    one row each) as a `Comparison`: its table,
    figures and projections. A projection reuses each experiment's step as the log counted it
    (`Comparison.project` from its Experiment counts it once); an experiment never counted is
    projected with measured compute, and its rows say so."""
    from .comparison import Comparison
    from .runs.scheduling.comparison_rounds import merge_logged_rounds
    from .store import RunLog, WorkCounts

    log = RunLog(path)
    return Comparison(merge_logged_rounds(log.results()), counter=WorkCounts(log).stored)


def load_ipython_extension(ipython) -> None:
    """`%load_ext gpu_parallel_kit`: registers the `%gpk` magics (TensorFlow stays unloaded in
    the kernel) and starts the default backend's server in the background, so the first run
    finds it ready."""
    from .notebook import load_ipython_extension as load
    from .runs.scheduling.servers_ahead import warm

    load(ipython)
    warm()
