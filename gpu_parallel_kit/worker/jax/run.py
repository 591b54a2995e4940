"""The body of one JAX run: Keras 3 on JAX under `keras.distribution`, no TensorFlow.

Preloaded by the JAX server (`worker/jax_server.py`), so it must not start JAX's runtime when
imported: the run sets its host device count first (`jax_devices.configure_jax_devices`).

- `single`: no distribution, one device.
- `data`: `keras.distribution.DataParallel` over a 1-D mesh of the run's devices.
- `tensor`: `keras.distribution.ModelParallel` over a (data, model) mesh, with the `LayoutMap`
  the kit derives (`sharding/layout.py`) or the user's patterns over it.
Every strategy trains with Keras's own `fit` on the same batches in the same order
(`batching.batch_indices`), so trained weights can be compared with a `single` run's.
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "jax"  # before Keras is imported, in a spawned child too

import datetime  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

from ..errors import GpkError  # noqa: E402
from ..runs.failures import classify_exception  # noqa: E402
from ..runs.results import RunResult  # noqa: E402
from ..runs.spec import RunSpec  # noqa: E402
from ..runs.tuning import Tuned  # noqa: E402
from ..version import __version__  # noqa: E402
from .batching import batch_indices  # noqa: E402
from .budget import MemoryBudgetExceeded  # noqa: E402
from .child import Finished, finished_result, run_child, tuned_recorder  # noqa: E402
from .compiling import compile_model, load_model  # noqa: E402
from .jax_devices import configure_jax_devices, device_names, peak_memory  # noqa: E402
from .jax_feed import OrderedBatches, take  # noqa: E402
from .jax_strategy import JaxStrategy  # noqa: E402
from .keras_internals import set_seed_without_tensorflow  # noqa: E402
from .lr_schedule import apply_run_rule  # noqa: E402
from .recorder import StepTimer  # noqa: E402
from .run_data import run_arrays, steps_per_epoch  # noqa: E402
from .stats import warmup_steps  # noqa: E402
from .tuning import tune_run  # noqa: E402

if keras.backend.backend() != "jax":  # Keras was imported earlier on another backend
    raise RuntimeError(
        f"Keras runs on {keras.backend.backend()!r} in this process; a JAX run needs a fresh one"
    )


def jax_worker_main(spec: RunSpec, connection: Any) -> None:
    """Entry point of a JAX run's process; always ends the process, never returns."""
    run_child(spec, connection, run_jax_in_this_process)


def run_jax_in_this_process(
    spec: RunSpec,
    emit: Callable[..., None],
    report_and_exit: Callable[[RunResult], None] | None = None,
) -> RunResult:
    """Run one JAX spec here and return its result; failures become a result, not an exception."""
    start = time.perf_counter()
    phase = "setting up devices"
    base = _base_fields(spec)
    try:
        emit(event="phase", phase=phase)
        warnings.filterwarnings("ignore", module="keras")
        devices = configure_jax_devices(spec.devices, spec.training.deterministic)
        names = device_names(devices)
        x, y = run_arrays(spec.data)
        strategy = JaxStrategy(spec, devices)
        phase = "building the model"
        emit(event="phase", phase=phase)
        steps = steps_per_epoch(spec, len(x))
        total = steps * spec.training.epochs
        warmup = warmup_steps(spec.training.warmup_steps, total)
        sample = take(x, np.zeros(1, dtype=np.int64))
        chosen: list[Tuned] = []
        model = strategy.build(
            lambda: _built_model(spec, sample, chosen, steps, total, warmup), sample
        )
        tuned = chosen[-1]
        phase = "preparing the data"
        order = batch_indices(
            len(x), spec.global_batch, total, spec.training.seed, spec.training.shuffle
        )
        batches = OrderedBatches(x, y, order)  # gathered batch by batch as fit asks
        with strategy.scope():
            base_lr, learning_rate = apply_run_rule(model.optimizer, spec, steps)
        recorder = tuned_recorder(emit, tuned, warmup, total, steps)
        startup = time.perf_counter() - start
        phase = "training"
        emit(event="phase", phase=phase, total=total)

        def finish() -> RunResult:
            nonlocal phase
            if spec.save_weights:
                phase = "saving the weights"
                np.savez(spec.save_weights, *[np.asarray(w) for w in model.get_weights()])
            phase = "measuring communication"
            measured = (
                _measured(strategy, model, *batches[0]) if spec.measure_comm else None
            )  # on the run's first batch
            memory, memory_source = peak_memory(spec.devices.kind, devices)
            done = Finished(
                names,
                strategy.describe(),
                steps,
                startup,
                memory,
                memory_source,
                base_lr,
                learning_rate,
            )
            return finished_result(
                spec,
                base,
                done,
                recorder,
                tuned,
                model,
                lambda step: strategy.result_fields(model, measured, step),
            )

        if report_and_exit is not None:
            recorder.on_train_end = lambda: report_and_exit(finish())
        strategy.prepare(model)
        with strategy.scope():
            model.fit(
                batches,
                epochs=spec.training.epochs,
                steps_per_epoch=steps,
                callbacks=[StepTimer(recorder)],
                verbose=0,
                shuffle=False,
            )
        return finish()
    except BaseException as error:  # noqa: BLE001 - every failure becomes this run's row
        status, reason = classify_exception(error, phase)
        if not isinstance(error, GpkError | MemoryBudgetExceeded):
            traceback.print_exc()  # unexpected: the worker's stderr keeps the whole story
        return RunResult(**base, status=status, reason=reason)


def _measured(strategy: JaxStrategy, model: keras.Model, x: Any, y: Any) -> dict[str, Any] | None:
    """The communication figures, or None when measuring them failed: the trained run keeps its
    row (marked not measured), and the worker's stderr keeps why."""
    try:
        return strategy.after_training(model, x, y)
    except Exception:  # noqa: BLE001 - a measurement must not cost the run its results
        traceback.print_exc()
        return None


def _built_model(
    spec: RunSpec, sample: Any, chosen: list[Tuned], steps: int, total: int, warmup: int
) -> keras.Model:
    """The user's model, seeded, compiled with what tune chose (appended to `chosen`) and with
    its variables, in the current scope.

    A model that makes its variables on first call (Sequential without `keras.Input`, a
    subclassed model) is called once on one sample, in inference mode, as on TensorFlow.
    """
    set_seed_without_tensorflow(spec.training.seed)
    model = load_model(spec.model)
    tuned = tune_run(spec, model, steps, total, warmup)
    chosen.append(tuned)
    jit = "auto" if tuned.jit_compile is None else tuned.jit_compile  # auto: XLA, on JAX
    compile_model(model, spec.model, spec.training, tuned.steps_per_execution, jit)
    if not (model.built and model.weights):
        model(sample, training=False)
    return model


def _base_fields(spec: RunSpec) -> dict[str, Any]:
    return dict(
        **spec.result_identity(),
        versions={
            "python": platform.python_version(),
            "jax": jax.__version__,
            "keras": keras.__version__,
            "gpu_parallel_kit": __version__,
        },
        created_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    )
