"""The compiler's count of a training step against hand counts, and a projection that counts
the step once and finds the count in the run log the second time. Slow: they start JAX."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.analysis.cost_model.counted_work import from_counts

pytestmark = pytest.mark.slow


def _layer_flops(cases):
    """Forward FLOPs per sample of each layer of one-layer models, as the worker counts them
    (compiled alone by XLA): `cases` maps a name to (build, input shape, dtype). Each model is
    counted in a child with Keras on JAX; the children run side by side (CI's time)."""
    import numpy as np

    import gpu_parallel_kit as gpk
    from gpu_parallel_kit.runs.processes.child_process import start_child, stop_child
    from gpu_parallel_kit.runs.processes.entry_points import WORK_COUNT_JAX_ENTRY
    from gpu_parallel_kit.runs.scheduling.step_counting import count_batches

    started, experiments = {}, []  # an experiment's arrays live as long as it does
    try:
        for name, (build, input_shape, dtype) in cases.items():
            x = np.zeros((8, *input_shape), dtype=dtype)
            y = np.zeros((8, 1), dtype="float32")
            exp = gpk.Experiment(build, data=(x, y), batch_size=4, progress=False, log=":memory:")
            experiments.append(exp)
            spec = exp.plan("single", 1)
            started[name] = start_child(WORK_COUNT_JAX_ENTRY, spec, count_batches(4), backend="jax")
        counted = {}
        for name, (_, receiver) in started.items():
            assert receiver.poll(300), f"{name} was not counted within 300 s"
            ok, answer = receiver.recv()
            assert ok, answer
            counted[name] = from_counts(answer)
        return counted
    finally:
        for process, _ in started.values():
            stop_child(process)


def _model(layer, input_shape, dtype="float32", pair=False):
    """The layer under test, then a flattening and one output, so any loss applies."""

    def build():
        import keras

        inputs = keras.Input(input_shape, dtype=dtype)
        tested = layer()
        x = tested(inputs, inputs) if pair else tested(inputs)
        x = keras.layers.Dense(1)(keras.layers.Flatten()(x))
        model = keras.Model(inputs, x)
        model.compile(optimizer="sgd", loss="mse")
        return model

    return build


def test_hand_counts_of_dense_conv_attention_and_embedding(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def dense():
        import keras

        return keras.layers.Dense(64)

    def conv():
        import keras

        return keras.layers.Conv2D(16, 3, padding="same")

    def attention():
        import keras

        return keras.layers.MultiHeadAttention(num_heads=4, key_dim=8)

    def embedding():
        import keras

        return keras.layers.Embedding(100, 32)

    counted = _layer_flops(
        {
            "dense": (_model(dense, (32,)), (32,), "float32"),
            "conv": (_model(conv, (8, 8, 3)), (8, 8, 3), "float32"),
            "attention": (_model(attention, (10, 32), pair=True), (10, 32), "float32"),
            "embedding": (_model(embedding, (10,), "int32"), (10,), "int32"),
        }
    )
    first = {name: work.layers[0] for name, work in counted.items()}
    # Dense 32 -> 64: a multiply and an add per weight, plus the bias
    assert first["dense"].forward_flops == pytest.approx(2 * 32 * 64 + 64, rel=0.02)
    # Conv2D 3x3, 3 -> 16 channels on 8x8, same padding: 2 per multiply-add, over the taps
    # that fall inside the image (22 per row and column: 2 at each edge, 3 at the 6 inside
    # positions), plus the bias
    taps = 22 * 22
    assert first["conv"].forward_flops == pytest.approx(16 * 3 * 2 * taps + 8 * 8 * 16, rel=0.02)
    # Attention, sequence 10, width 32, 4 heads of 8: Q, K, V and output projections
    # (4 · 2·10·32·32) plus scores and weighted values (2 · 2·10·10·32), softmax aside
    projections = 4 * 2 * 10 * 32 * 32
    scores = 2 * 2 * 10 * 10 * 32
    assert first["attention"].forward_flops == pytest.approx(projections + scores, rel=0.1)
    # Embedding: a lookup moves bytes; the compiler counts only index arithmetic, fewer than
    # two operations per value looked up (a one-hot product would be 2 · 100 per value)
    assert first["embedding"].forward_flops < 2 * 10 * 32
    assert first["embedding"].forward_bytes >= 10 * 32 * 4


def test_project_counts_once_and_reuses_the_logged_count(tmp_path, monkeypatch, capsys):
    import gpu_parallel_kit as gpk

    monkeypatch.chdir(tmp_path)
    exp = gpk.Experiment(
        "mlp", data="tabular", batch_size=256, steps_per_epoch=4, samples=2048, progress=False
    )
    comparison = exp.compare(["single"], [1])
    projected = comparison.project("nvlink4", [1, 8], strategies=["data"])
    rows = [r for r in projected.results if r.projected]
    assert rows and all(r.extra["compute_source"].startswith("counted") for r in rows)
    assert rows[0].extra["gpu"] == "h100"
    assert "Counting the step of mlp" in capsys.readouterr().out
    again = comparison.project("nvlink4", [1, 8], strategies=["data"])
    assert "Counting" not in capsys.readouterr().out  # read back from the run log
    assert [r.step_time_s for r in again.results if r.projected] == [r.step_time_s for r in rows]


COUNT_BUILTINS = """
import json, os, sys
os.environ["KERAS_BACKEND"] = "jax"
import gpu_parallel_kit as gpk
from gpu_parallel_kit.runs.scheduling.step_counting import count_spec
from gpu_parallel_kit.worker.jax.work_count import _count_jax

counted = {}
for model, data in (("cnn", "images"), ("transformer", "tokens")):
    exp = gpk.Experiment(model, data, batch_size=64, progress=False, log=":memory:", backend="jax")
    spec = count_spec(exp.experiment_id, exp.model, exp.data, exp._run_training(), "jax")
    count = _count_jax(spec, (64, 128), drawn_weights=sys.argv[1] == "drawn")
    count.pop("count_s")
    counted[model] = count
print(json.dumps(counted, sort_keys=True))
"""


def test_the_counting_childs_shortcuts_leave_the_count_as_it_was():
    # The counting child compiles with LLVM's optimisation off and builds the weights as zeros
    # (twice as fast): the count comes from the HLO's shapes, which neither may change.
    import os
    import subprocess
    import sys

    from gpu_parallel_kit.worker.jax.work_count import UNOPTIMISED_MACHINE_CODE

    children = {
        flags: subprocess.Popen(
            [sys.executable, "-c", COUNT_BUILTINS, "zeros" if flags else "drawn"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "XLA_FLAGS": flags},
        )
        for flags in ("", UNOPTIMISED_MACHINE_CODE)
    }
    counts = {flags: child.communicate(timeout=300)[0] for flags, child in children.items()}
    optimised, unoptimised = counts[""], counts[UNOPTIMISED_MACHINE_CODE]
    assert '"flops"' in optimised and '"kernels"' in optimised
    assert unoptimised == optimised
