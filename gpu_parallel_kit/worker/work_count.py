"""The work of one training step, counted by the compiler: FLOPs and bytes accessed, per step
and per layer call, for the cost model's projection onto a GPU
(`analysis/cost_model/counted_work.py`).

Runs in a short child of its own, started only when a projection asks for a count that the run
log does not hold yet, so counting never adds to a run's fixed cost. Each backend counts in its
own module, entered by name (`runs/processes/entry_points.py`):

- `jax/work_count.py` (preferred; the JAX server forks the child): Keras's own train step
  (`model.train_step`, forward, backward and the optimizer update, exactly what `fit` jits) is
  lowered and compiled by XLA, and `compiled.cost_analysis()` gives "flops" and
  "bytes accessed". Each layer call of a functional model is compiled alone for its forward
  count. The step is counted at two batch sizes, so the count splits into a part per sample
  and a part per step (the optimizer update, the weights read once per step).
- `tensorflow/work_count.py` (where JAX is not installed): TensorFlow's profiler counts the float
  operations of the traced train step's graph. It gives no bytes and no per-layer split.

What both share is here: the count's batches, its model, and its answer to the caller. Nothing
trains or runs the step: compiling is the whole cost (seconds for a ResNet-50).
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from typing import Any

from ..runs.description.run_spec import RunSpec


def answer(sender: Any, count: Callable[[], dict[str, Any]]) -> None:
    """Send the caller (True, `count()`) or (False, one sentence), then end the child."""
    try:
        answered = (True, count())
    except BaseException as error:  # noqa: BLE001 - the caller turns it into one sentence
        traceback.print_exc()
        answered = (False, f"{type(error).__name__}: {error}")
    try:
        sender.send(answered)
        sender.close()
    finally:
        os._exit(0)


def batch_of(spec: RunSpec, batch: int) -> tuple[Any, Any]:
    """`batch` rows of the run's data, repeated from the start where it has fewer."""
    import numpy as np

    from ..runs.description.nested_arrays import take_rows
    from .run_data import run_arrays, sample_count

    x, y = run_arrays(spec.data)
    take = np.arange(batch) % sample_count(x)
    return take_rows(x, take), take_rows(y, take)


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
