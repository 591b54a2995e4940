"""A JAX pipeline stage's calls donate the state they replace, as Keras's train step does.

Without donation each call writes its weights, optimizer state and gradient sums into fresh
buffers, and a one-stage pipeline pays the new pages on every call where `single` pays none.
Donating them must not cost anything held past a call: a step's wait for its update made before
the next step was dispatched, a snapshot restored several times, the user's own variables.
"""

from __future__ import annotations

import textwrap

import pytest

from tests.jax.json_child import run_json_script

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import json
    import jax
    import numpy as np
    import keras
    import gpu_parallel_kit as gpk
    from gpu_parallel_kit.worker.jax.run import run_jax_in_this_process
    from gpu_parallel_kit.worker.pipeline import schedule_runner

    runners = []
    close = schedule_runner.ScheduleRunner.close

    def kept_close(self):
        runners.append(self)
        close(self)

    schedule_runner.ScheduleRunner.close = kept_close

    def mlp():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                                  keras.layers.Dense(3)])
        model.compile(optimizer="adam",
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 8)).astype("float32")
    y = rng.integers(0, 3, 256).astype("int32")
    exp = gpk.Experiment(mlp, (x, y), batch_size=32, epochs=1, progress=False, backend="jax")
    spec = exp.plan("pipeline", 1, schedule="naive", measure_comm=False)
    result = run_jax_in_this_process(spec, lambda *args, **kwargs: None)
    assert result.ok, result.reason
    runner = runners[0]
    stage = runner.stages[0]
    xb, yb = x[:32], y[:32]

    before = list(stage.trainable)
    first = runner.step(xb, yb, settle=False)
    donated_by_a_step = all(a.is_deleted() for a in before)
    second = runner.step(xb, yb, settle=False)  # takes the first step's weights
    runner.settle(first)
    runner.settle(second)
    before = list(stage.trainable)
    runner.settle(runner.steps(lambda: (xb, yb), 2)[-1])
    donated_by_steps = all(a.is_deleted() for a in before)

    def state():  # copied out: a NumPy view would keep its buffer from being donated
        return [np.array(a) for a in jax.tree.leaves(
            (stage.trainable, stage.non_trainable, stage.optimizer_state, stage.accumulated))]

    values = state()
    kept = stage.snapshot()
    restored = []
    for _ in range(2):
        runner.step(xb, yb)
        stage.restore(kept)
        restored.append(all(np.array_equal(a, v) for a, v in zip(state(), values)))
    variables_alive = not any(v.value.is_deleted() for v in stage.variables)
    print("JSON" + json.dumps({
        "donated_by_a_step": donated_by_a_step,
        "donated_by_steps": donated_by_steps,
        "settled": [first.loss, second.loss],
        "restored": restored,
        "variables_alive": variables_alive,
    }))
    """
)


def test_a_stage_donates_its_state_and_keeps_what_is_held(tmp_path):
    found = run_json_script(SCRIPT, tmp_path, timeout=300)
    assert found["donated_by_a_step"], "a step's update wrote its state into fresh buffers"
    assert found["donated_by_steps"], "a call of several steps wrote its state anew"
    assert all(loss > 0 for loss in found["settled"])  # settled after the next was dispatched
    assert found["restored"] == [True, True]
    assert found["variables_alive"]
