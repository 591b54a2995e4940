"""gpu_parallel_kit: try data- and model-parallel training of your own Keras model.

Importing the kit does not import TensorFlow; `list_devices` imports it without starting its
runtime, and every run trains in a fresh worker process.
"""

__version__ = "0.1.0"

from .api import Comparison, Experiment  # noqa: E402
from .devices import list_devices  # noqa: E402
from .errors import GpkError  # noqa: E402
from .results import RunResult  # noqa: E402
from .store import history  # noqa: E402

__all__ = ["Comparison", "Experiment", "GpkError", "RunResult", "history", "list_devices"]


def load_ipython_extension(ipython) -> None:
    """`%load_ext gpu_parallel_kit`: registers the `%gpk` magics (TensorFlow stays unloaded)."""
    from .notebook import load_ipython_extension as load

    load(ipython)
