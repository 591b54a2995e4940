"""The fast path inside the worker, without training: step times with several steps per
execution, the async-safe timer, and what tune picks for a run planned on faked GPUs."""

from __future__ import annotations

import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.runs.description import device_choice
from gpu_parallel_kit.runs.description.device_choice import PhysicalDevice

# The recorder, the timer and tune import Keras (on TensorFlow) in this process: each test imports
# them itself, so that the fast subset collects this module without TensorFlow.
pytestmark = pytest.mark.slow

CPU = PhysicalDevice("/physical_device:CPU:0", "cpu", 0, "2 cores")


class Clock:
    """A hand-wound perf_counter: step times are exact, so the arithmetic can be checked."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr("gpu_parallel_kit.worker.measuring.recorder.time.perf_counter", clock)
    return clock


def test_an_executions_time_is_spread_over_its_steps_and_warm_up_is_whole_executions(clock):
    from gpu_parallel_kit.worker.measuring.recorder import StepRecorder, StepTimer

    recorder = StepRecorder(12, lambda **_: None, warmup_steps=4, steps_per_execution=4)
    timer = StepTimer(recorder)
    timer.on_train_begin()
    timer.on_epoch_begin(0)
    for batch, seconds in ((3, 2.0), (7, 0.4), (11, 0.8)):  # Keras: the execution's last step
        clock.now += seconds
        timer.on_train_batch_end(batch)
    timer.on_epoch_end(0, {"loss": 1.0})
    summary = recorder.summary()
    assert recorder.steps_done == 12
    assert summary["warmup_steps"] == 4
    assert summary["step_times_s"] == pytest.approx((0.1,) * 4 + (0.2,) * 4)
    assert summary["step_time_s"] == pytest.approx(0.15)
    # The first execution traced: its time beyond four typical steps, not one step's excess.
    assert summary["compile_time_s"] == pytest.approx(2.0 - 4 * 0.15)
    assert "execution's time / 4" in recorder.method()
    assert "per step" in StepRecorder(4, lambda **_: None).method()


def test_steps_timed_task_by_task_are_set_aside_while_others_remain(clock):
    from gpu_parallel_kit.worker.measuring.recorder import StepRecorder

    recorder = StepRecorder(6, lambda **_: None, warmup_steps=1)
    recorder.train_begin()
    for seconds, aside in ((1.0, False), (0.5, True), (0.5, True), (0.1, False), (0.1, False)):
        clock.now += seconds
        recorder.step_end(aside=aside)
    clock.now += 0.2
    recorder.step_end()
    assert recorder.summary()["step_times_s"] == pytest.approx((0.1, 0.1, 0.2))
    assert "2 steps timed task by task are left out" in recorder.method()
    # With nothing else after warm-up, the steps set aside are what there is.
    alone = StepRecorder(2, lambda **_: None, warmup_steps=1)
    alone.train_begin()
    for aside in (False, True):
        clock.now += 0.3
        alone.step_end(aside=aside)
    assert alone.summary()["step_times_s"] == pytest.approx((0.3,))


def test_a_late_call_for_an_execution_already_counted_adds_no_step(clock):
    from gpu_parallel_kit.worker.measuring.recorder import StepRecorder, StepTimer

    recorder = StepRecorder(8, lambda **_: None, warmup_steps=0, steps_per_execution=4)
    timer = StepTimer(recorder)
    timer.on_train_begin()
    timer.on_epoch_begin(0)
    clock.now += 1.0
    timer.on_train_batch_end(7)  # a thread ran the second execution's callback first
    clock.now += 0.5
    timer.on_train_batch_end(3)
    assert recorder.steps_done == 8
    assert recorder.summary()["step_times_s"] == pytest.approx((1.0 / 8,) * 8)


def test_the_timer_lets_a_thread_safe_backend_run_ahead(monkeypatch):
    import keras

    from gpu_parallel_kit.worker.measuring.recorder import StepRecorder, StepTimer
    from gpu_parallel_kit.worker.tensorflow import keras_internals

    class Plain(keras.callbacks.Callback):
        """A per-batch callback as users write them: not marked async-safe."""

        def on_train_batch_end(self, batch, logs=None):
            pass

    timer = StepTimer(StepRecorder(8, lambda **_: None))
    assert timer.async_safe
    # TensorFlow's backend calls batch callbacks in line whatever they say; its fit converts
    # the logs to floats at each execution's end anyway, so the timer adds no wait there.
    assert keras_internals.dispatches_async([timer]) is False
    monkeypatch.setattr("keras.src.backend.IS_THREAD_SAFE", True)  # as JAX's and torch's are
    assert keras_internals.dispatches_async([timer]) is True
    assert keras_internals.dispatches_async([timer, Plain()]) is False


def test_a_prepared_run_waits_for_its_turn_once_its_warm_up_is_stamped(clock):
    import threading

    from gpu_parallel_kit.worker.measuring.recorder import StepRecorder, StepTimer

    recorder = StepRecorder(6, lambda **_: None, warmup_steps=2)
    seen = []

    def turn() -> float:
        seen.append(recorder.steps_done)
        clock.now += 30.0  # the other runs' turns
        return 30.0

    recorder.after_warmup = turn
    timer = StepTimer(recorder)
    assert timer.async_safe  # a thread-safe backend's loop still runs ahead of the timer
    timer.on_train_begin()
    timer.on_epoch_begin(0)
    for batch in range(2):
        timer.on_train_batch_begin(batch)  # warm-up: no wait
        clock.now += 1.0
    # Keras's thread stamps the warm-up steps late, after the loop has begun the first timed one.
    stamper = threading.Timer(0.2, lambda: [timer.on_train_batch_end(b) for b in (0, 1)])
    stamper.start()
    timer.on_train_batch_begin(2)
    stamper.join()
    assert seen == [2] and recorder.waited_s == 30.0
    for batch in range(2, 6):
        timer.on_train_batch_begin(batch)  # once only
        clock.now += 0.5
        timer.on_train_batch_end(batch)
    assert seen == [2]
    assert recorder.summary()["step_times_s"] == pytest.approx((0.5,) * 4)  # the turn in none


def test_evaluations_inside_an_epoch_keep_the_timer_in_line(monkeypatch):
    from gpu_parallel_kit.worker.measuring.recorder import StepRecorder, StepTimer
    from gpu_parallel_kit.worker.tensorflow import keras_internals

    recorder = StepRecorder(8, lambda **_: None)
    recorder.evaluate = lambda: {"val_loss": 0.0}
    recorder.evaluate_every_steps = 4  # must see the weights of the step that triggers it
    timer = StepTimer(recorder)
    monkeypatch.setattr("keras.src.backend.IS_THREAD_SAFE", True)
    assert not timer.async_safe
    assert keras_internals.dispatches_async([timer]) is False


def _plan_on_fake_gpus(monkeypatch, gpus: int, **plan):
    fakes = [
        PhysicalDevice(f"/physical_device:GPU:{i}", "gpu", i, "Fake GPU", 16 << 30)
        for i in range(gpus)
    ]
    monkeypatch.setattr(
        device_choice, "discover_physical_devices", lambda backend=None: (CPU, *fakes)
    )
    exp = gpk.Experiment(
        model="mlp", samples=4096, batch_size=256, epochs=2, progress=False, **plan
    )
    return exp


def _uncompiled():
    import keras

    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])


def test_tune_on_one_faked_gpu_turns_xla_on_as_kerass_own_fit_would(monkeypatch):
    from gpu_parallel_kit.worker.tuning import tune_run

    exp = _plan_on_fake_gpus(monkeypatch, 1)
    spec = exp.plan("single", 1)
    assert spec.devices.kind == "gpu"
    tuned = tune_run(spec, _uncompiled(), steps_per_epoch=16, total_steps=32, warmup=2)
    assert tuned.jit_compile is True and tuned.steps_per_execution == 4
    determined = exp.plan("single", 1, deterministic=True)
    assert tune_run(determined, _uncompiled(), 16, 32, 2).jit_compile is None  # Keras's: off


def test_tune_on_faked_gpus_keeps_xla_off_under_mirrored_strategy(monkeypatch):
    from gpu_parallel_kit.worker.tuning import tune_run

    spec = _plan_on_fake_gpus(monkeypatch, 2).plan("data", 2)
    assert (spec.devices.kind, spec.devices.virtual) == ("gpu", False)
    tuned = tune_run(spec, _uncompiled(), steps_per_epoch=16, total_steps=32, warmup=2)
    assert tuned.jit_compile is None and "MirroredStrategy" in tuned.why["jit_compile"]


def test_a_builders_own_compile_settings_count_as_the_users(monkeypatch):
    from gpu_parallel_kit.worker.tuning import tune_run

    spec = _plan_on_fake_gpus(monkeypatch, 2).plan("data", 2)
    model = _uncompiled()
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=2, jit_compile=True)
    tuned = tune_run(spec, model, steps_per_epoch=16, total_steps=32, warmup=2)
    assert (tuned.steps_per_execution, tuned.jit_compile) == (2, True)
    assert tuned.why["steps_per_execution"] == tuned.why["jit_compile"] == "user"
    # A run's own value wins over the builder's.
    spec = _plan_on_fake_gpus(monkeypatch, 2).plan("data", 2, steps_per_execution=1)
    assert tune_run(spec, model, 16, 32, 2).steps_per_execution == 1


class SynchronousRunner:
    """A one-stage runner whose calls return when done, as TensorFlow's eager calls do: a call
    of `count` steps winds the clock by `count` seconds, a step run alone by 2."""

    runs_ahead = False

    def __init__(self, clock) -> None:
        self.clock = clock

    def steps(self, take, count):
        from gpu_parallel_kit.worker.pipeline.runner_messages import StepReport

        self.clock.now += count
        return [StepReport(loss=1.0, steps_in_call=count) for _ in range(count)]

    def step(self, x, y, timed=False, serial=False, settle=True):
        from gpu_parallel_kit.worker.pipeline.runner_messages import StepReport, TaskRecord

        self.clock.now += 2.0
        tasks = [TaskRecord(0, "forward", 0, 0.0, 1.0)] if timed else []
        return StepReport(loss=1.0, tasks=tasks)

    def settle(self, report):
        return report


def test_a_call_that_returns_when_done_is_stamped_with_its_own_time(clock):
    """Stamping each call once the next is dispatched suits JAX, whose calls run ahead; a call
    that returns when done would give each step the next call's time (a group of four the
    single step after it, the single step nearly nothing)."""
    from gpu_parallel_kit.worker.measuring.recorder import StepRecorder
    from gpu_parallel_kit.worker.pipeline.schedule_runner import _one_round

    # 20 steps: 4 of warm-up, 3 timed alone, then calls of 4, 4, 4 and one step left.
    recorder = StepRecorder(20, lambda **_: None, warmup_steps=4, steps_per_execution=4)
    recorder.train_begin()
    _one_round(SynchronousRunner(clock), lambda: (None, None), 1, 20, recorder, 4)
    times = recorder.summary()["step_times_s"]
    assert times == pytest.approx((1.0,) * 12 + (2.0,)), times
