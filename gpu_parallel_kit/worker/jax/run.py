"""A JAX run: the skeleton's steps with Keras 3 on JAX under `keras.distribution`, no TensorFlow.

Preloaded by the JAX server (`worker/jax/server.py`), so it must not start JAX's runtime when
imported: the run sets its host device count first (`devices.configure_jax_devices`).

The strategy's record names its class in `strategies.py` (single, data, tensor); every one
trains with Keras's own `fit` on the same batches in the same order (`batching.batch_indices`,
read as fit asks by `feed.OrderedBatches`), so trained weights can be compared with a `single`
run's.
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "jax"  # before Keras is imported, in a spawned child too

import contextlib  # noqa: E402
import dataclasses  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

from ...runs.description.communication_reuse import MeasuredComm  # noqa: E402
from ...runs.description.run_spec import RunSpec  # noqa: E402
from ...runs.description.tuning_rules import Tuned  # noqa: E402
from ...runs.results.run_result import RunResult  # noqa: E402
from ...strategies import resolve, strategy_record  # noqa: E402
from ..batching import batch_indices  # noqa: E402
from ..child import run_child  # noqa: E402
from ..compiling import compile_model, load_model  # noqa: E402
from ..input_names import check_input_names  # noqa: E402
from ..measuring.peak_memory import PeakMemory  # noqa: E402
from ..measuring.recorder import StepRecorder  # noqa: E402
from ..quiet_start import native_stderr_filtered  # noqa: E402
from ..run_data import run_arrays, sample_count, steps_per_epoch  # noqa: E402
from ..skeleton import BuiltModel, run_in_this_process  # noqa: E402
from ..strategy_hooks import ModelAndBatches  # noqa: E402
from ..tuning import tune_run  # noqa: E402
from .device_setup import DETERMINISM, configure_jax_devices, device_names, peak_memory  # noqa: E402
from .feed import OrderedBatches, take  # noqa: E402
from .keras_internals import set_seed_without_tensorflow  # noqa: E402
from .strategies import JaxStrategy  # noqa: E402

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
    next_round: Callable[[], bool] | None = None,
) -> RunResult:
    """Run one JAX spec here and return its result (a failure is a result too)."""
    return run_in_this_process(spec, emit, report_and_exit, JaxRun(spec), next_round)


def make_strategy(spec: RunSpec, devices: list[Any]) -> JaxStrategy:
    """The JAX strategy class the strategy's record names."""
    return resolve(strategy_record(spec.strategy).worker_classes["jax"])(spec, devices)


class JaxRun:
    """The skeleton's steps on JAX: host devices or GPUs, batches read as fit asks, fit."""

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.batches: OrderedBatches | None = None

    def versions(self) -> dict[str, str]:
        return {"jax": jax.__version__, "keras": keras.__version__}

    def set_up_devices(self) -> tuple[str, ...]:
        spec = self.spec
        self.devices = configure_jax_devices(spec.devices, spec.training.deterministic)
        self.strategy = make_strategy(spec, self.devices)
        return device_names(self.devices)

    def prepare_data(self) -> int:
        spec = self.spec
        shuffle = spec.training.shuffle
        if spec.data.kind == "dataset_builder":  # read with tf.data, then as NumPy
            from ..tensorflow.datasets import numpy_pass  # noqa: PLC0415 - only builders need it

            with native_stderr_filtered():  # TensorFlow's start-up chatter, not the user's
                self.x, y = numpy_pass(spec.data, spec.training, spec.global_batch)
            shuffle = False  # the builder's own order, as a TensorFlow run takes it
        else:
            self.x, y = run_arrays(spec.data)
        steps = steps_per_epoch(spec, sample_count(self.x))
        order = batch_indices(
            sample_count(self.x),
            spec.global_batch,
            steps * spec.training.epochs,
            spec.training.seed,
            shuffle,
        )
        # Every round this process trains reads the same batches
        # (runs/scheduling/resident_rounds.py).
        order = np.tile(order, (spec.rounds_here, 1))
        self.batches = OrderedBatches(self.x, y, order)  # gathered batch by batch as fit asks
        self.steps_per_epoch = steps
        return steps

    def build(self, steps_per_epoch: int, total: int, warmup: int) -> BuiltModel:
        sample = take(self.x, np.zeros(1, dtype=np.int64))
        chosen: list[Tuned] = []

        def builder() -> keras.Model:
            # A builder may import TensorFlow (keras-hub does, where it is installed): its
            # start-up chatter stays out of the notebook, anything else gets through.
            with native_stderr_filtered():
                built = _built_model(self.spec, sample, steps_per_epoch, total, warmup)
            chosen.append(built.tuned)
            return built.model

        return BuiltModel(self.strategy.build(builder, sample), chosen[-1])

    def scope(self) -> contextlib.AbstractContextManager:
        return self.strategy.scope()

    def watch(self, recorder: StepRecorder, model: keras.Model) -> None:
        return None

    def train(self, model: keras.Model, recorder: StepRecorder) -> None:
        run = self.hooks_input(model)
        self.strategy.before_training(run)
        self.strategy.train(run, self.steps_per_epoch, recorder)

    def prepare_measurement(self, model: keras.Model) -> None:
        self.strategy.prepare_measurement(self.measured_on(model))

    def time_tasks_alone(self, model: keras.Model) -> None:
        self.strategy.time_tasks_alone(self.hooks_input(model))

    def measure(self, model: keras.Model) -> None:
        self.strategy.measure(self.measured_on(model))

    def peak_memory(self) -> PeakMemory:
        return peak_memory(self.spec.devices.kind, self.devices)

    def describe(self) -> str:
        return self.strategy.describe()

    def result_fields(self, model: keras.Model, step_time_s: float | None) -> dict[str, Any]:
        run = self.hooks_input(model)
        if run.batches is not None:  # on a global batch, as every process holds it
            self.strategy.after_training(self.measured_on(model))
        fields = self.strategy.result_fields(run, step_time_s)
        if self.spec.training.deterministic:
            fields["extra"]["determinism"] = DETERMINISM[self.spec.devices.kind]
        return fields

    def lend_communication(self, measured: MeasuredComm) -> None:
        self.spec = self.strategy.spec = dataclasses.replace(self.spec, comm_from=measured)

    def hooks_input(self, model: keras.Model) -> ModelAndBatches:
        """What the strategy's hooks work on: the model and the batches fit reads."""
        return ModelAndBatches(model, self.batches)

    def measured_on(self, model: keras.Model) -> ModelAndBatches:
        """What the communication is measured on: here, as the hooks' input."""
        return self.hooks_input(model)


def _built_model(spec: RunSpec, sample: Any, steps: int, total: int, warmup: int) -> BuiltModel:
    """The user's model, seeded, compiled with what tune chose, and with its variables, in the
    current scope; and tune's choice.

    A model that makes its variables on first call (Sequential without `keras.Input`, a
    subclassed model) is called once on one sample, in inference mode, as on TensorFlow.
    """
    set_seed_without_tensorflow(spec.training.seed)
    model = load_model(spec.model)
    check_input_names(model, sample)
    tuned = tune_run(spec, model, steps, total, warmup)
    jit = "auto" if tuned.jit_compile is None else tuned.jit_compile  # auto: XLA, on JAX
    compile_model(model, spec.model, spec.training, tuned.steps_per_execution, jit)
    if not (model.built and model.weights):
        model(sample, training=False)
    return BuiltModel(model, tuned)
