"""The body of one isolated run: set up devices, build, train, measure, report, exit.

This module is imported by the fork server before any run (so TensorFlow is imported once, not per
run) and must therefore not start the TensorFlow runtime at import time.
"""

from __future__ import annotations

from . import tensorflow_first  # noqa: F401 - TensorFlow before Keras, quietly

# isort: split

import datetime
import platform
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from ..errors import GpkError
from ..runs.failures import classify_exception
from ..runs.results import RunResult
from ..runs.spec import RunSpec
from ..version import __version__
from .child import Finished, finished_result, run_child, tuned_recorder
from .compiling import compile_model, load_model
from .device_setup import configure_worker_devices
from .engines import make_engine
from .budget import MemoryBudgetExceeded
from .engines.evaluation import watch_convergence
from .loading import build_from_data, labels, make_dataset, with_prefetch
from .lr_schedule import apply_run_rule
from .memory import peak_memory
from .preflight import check_inputs, check_targets, largest_label
from .stats import warmup_steps
from .tuning import tune_run


def worker_main(spec: RunSpec, connection: Any) -> None:
    """Entry point of the worker process; always ends the process, never returns."""
    run_child(spec, connection, run_in_this_process)


def run_in_this_process(
    spec: RunSpec,
    emit: Callable[..., None],
    report_and_exit: Callable[[RunResult], None] | None = None,
) -> RunResult:
    """Run one spec here and return its result; failures become a result, not an exception.

    With `report_and_exit`, a finished `fit` reports from its last callback and the process ends
    there: the weights and timestamps are final, and fit's input-iterator teardown that follows
    costs 1-7 s on two cores for nothing.
    """
    start = time.perf_counter()
    phase = "setting up devices"
    base = _base_fields(spec)
    try:
        emit(event="phase", phase=phase)
        warnings.filterwarnings("ignore", module="keras")
        device_names = configure_worker_devices(spec.devices)
        if spec.training.deterministic:
            tf.config.experimental.enable_op_determinism()  # same seed, same curve
        engine = make_engine(spec, device_names)
        phase = "building the model"
        emit(event="phase", phase=phase)
        with engine.build_scope():
            keras.utils.set_random_seed(spec.training.seed)
            model = load_model(spec.model)
        phase = "preparing the data"
        dataset, steps_per_epoch = make_dataset(spec.data, spec.training, spec.global_batch)
        total = steps_per_epoch * spec.training.epochs
        warmup = warmup_steps(spec.training.warmup_steps, total)
        tuned = tune_run(spec, model, steps_per_epoch, total, warmup)
        dataset = with_prefetch(dataset, tuned.prefetch_batches)
        phase = "building the model"  # compiled once the data says how many steps an epoch has
        with engine.build_scope():
            compile_model(
                model,
                spec.model,
                spec.training,
                tuned.steps_per_execution,
                "auto" if tuned.jit_compile is None else tuned.jit_compile,
            )
            check_inputs(model, dataset.element_spec)
            build_from_data(model, dataset.element_spec)
            check_targets(model, dataset.element_spec, largest_label(labels(spec.data)))
            base_lr, learning_rate = apply_run_rule(model.optimizer, spec, steps_per_epoch)
        recorder = tuned_recorder(emit, tuned, warmup, total, steps_per_epoch)
        watch_convergence(recorder, engine, model, spec)
        startup = time.perf_counter() - start
        phase = "training"
        emit(event="phase", phase=phase, total=total)

        def finish() -> RunResult:
            nonlocal phase
            phase = "reporting the results"
            if spec.save_weights:
                phase = "saving the weights"
                np.savez(spec.save_weights, *[np.asarray(w) for w in model.get_weights()])
            phase = "measuring communication"
            engine.after_training(model, dataset)
            memory, memory_source = peak_memory(spec.devices.kind, device_names)
            done = Finished(
                device_names,
                engine.describe_all_reduce(),
                steps_per_epoch,
                startup,
                memory,
                memory_source,
                base_lr,
                learning_rate,
            )
            return finished_result(spec, base, done, recorder, tuned, model, engine.result_fields)

        if report_and_exit is not None:
            recorder.on_train_end = lambda: report_and_exit(finish())
        engine.train(model, dataset, steps_per_epoch, recorder)
        return finish()
    except BaseException as error:  # noqa: BLE001 - every failure becomes this run's row
        status, reason = classify_exception(error, phase)
        if not isinstance(error, GpkError | MemoryBudgetExceeded):
            traceback.print_exc()  # unexpected: the worker's stderr keeps the whole story
        return RunResult(**base, status=status, reason=reason)


def _base_fields(spec: RunSpec) -> dict[str, Any]:
    return dict(
        **spec.result_identity(),
        versions=versions(),
        created_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    )


def versions() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "gpu_parallel_kit": __version__,
    }
