"""The work of one training step, counted by the compiler: FLOPs and bytes accessed.

Per step and per layer call, for the cost model's projection onto a GPU
(`analysis/cost_model/counted_work.py`). Runs in a short child started only when a projection
asks for a count the run log lacks. `jax/work_count.py` (preferred) compiles Keras's own
`model.train_step` with XLA at two batch sizes and reads `cost_analysis()`, and each layer call
alone; `tensorflow/work_count.py` (without JAX) counts the traced step's float operations, with
no bytes and no per-layer split. What both share is here: the batches, the model and the answer
to the caller. Nothing trains; compiling is the whole cost. See `docs/projection.md`.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from typing import Any

from ..errors import GpkError
from ..runs.description.nested_arrays import Samples
from ..runs.description.run_spec import RunSpec


def answer(sender: Any, count: Callable[[], dict[str, Any]]) -> None:
    """Send the caller (True, `count()`) or (False, one sentence: a `GpkError`'s own, else the
    error's kind and text), then end the child."""
    try:
        answered = (True, count())
    except GpkError as error:  # already the sentence, fix included
        answered = (False, str(error))
    except BaseException as error:  # noqa: BLE001 - the caller turns it into one sentence
        traceback.print_exc()
        answered = (False, f"{type(error).__name__}: {error}")
    try:
        sender.send(answered)
        sender.close()
    finally:
        os._exit(0)


def batch_of(spec: RunSpec, batch: int) -> Samples:
    """`batch` rows of the run's data, repeated from the start where it has fewer."""
    import numpy as np

    from ..runs.description.nested_arrays import take_rows
    from .run_data import run_arrays, sample_count

    x, y = run_arrays(spec.data)
    take = np.arange(batch) % sample_count(x)
    return Samples(take_rows(x, take), take_rows(y, take))


def counted_model(spec: RunSpec, x: Any) -> Any:
    """The user's model, compiled as a run compiles it, built on one row of `x`."""
    from .compiling import compile_model, load_model

    model = load_model(spec.model)
    compile_model(model, spec.model, spec.training)
    if not (model.built and model.weights):
        import numpy as np

        from ..runs.description.nested_arrays import take_rows

        model(take_rows(x, np.arange(1)), training=False)
    return model
