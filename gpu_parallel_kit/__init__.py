"""gpu_parallel_kit: try data- and model-parallel training of your own Keras model.

Importing the kit does not import TensorFlow; `list_devices` imports it without starting its
runtime, and every run trains in a fresh worker process.
"""

from .api import Experiment
from .comparison import Comparison
from .errors import GpkError
from .runs.devices import list_devices
from .runs.results import RunResult
from .store import history
from .version import __version__

__all__ = [
    "__version__",
    "Comparison",
    "Experiment",
    "GpkError",
    "RunResult",
    "history",
    "list_devices",
]


def load_ipython_extension(ipython) -> None:
    """`%load_ext gpu_parallel_kit`: registers the `%gpk` magics (TensorFlow stays unloaded in
    the kernel) and starts the default backend's server in the background, so the first run
    finds it ready."""
    from .notebook import load_ipython_extension as load
    from .runs.warm import warm

    load(ipython)
    warm()
