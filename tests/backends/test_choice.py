"""Choosing a backend: what each offers, refused in one sentence before any worker starts."""

from __future__ import annotations

import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.options.argtypes import mesh
from tests.builders import small_mlp, small_mlp_experiment

JAX = {"backend": "jax"}
# A CPU-only machine whose runs finish at once, their specs kept.
pytestmark = pytest.mark.usefixtures("fake_machine")


@pytest.mark.parametrize(
    ("settings", "plan", "message"),
    [
        ({}, dict(strategy="tensor", devices=2), "tensorflow.*use backend='jax'"),
        (JAX, dict(strategy="model", devices=2, schedule="naive", micro_batches=4), "runs one"),
        ({}, dict(strategy="data", devices=1, workers=2), "'multiworker' on backend='tens"),
        (JAX, dict(strategy="data", devices=2, mode="explicit"), "use mode='fit'"),
        (JAX, dict(strategy="data", devices=2, all_reduce="ring"), "XLA chooses"),
        (JAX, dict(strategy="tensor", devices=4, mesh=(2, 3)), "holds 6 devices"),
        (JAX, dict(strategy="tensor", devices=4, mesh=(0, 4)), "two positive"),
        (JAX, dict(strategy="tensor", devices=2, layout_map={"(": (None,)}), "not a regular"),
        (JAX, dict(strategy="tensor", devices=2, layout_map={"a": ("rows",)}), "'model' or None"),
        (JAX, dict(strategy="tensor", devices=4, mesh=(4, 1)), None),
        ({}, dict(strategy="single", devices=1, backend="torch"), "backend='torch' is not known"),
        ({}, dict(strategy="single", devices=1, backend=["jax", "tensorflow"]), "a run has one"),
    ],
)  # fmt: skip
def test_each_backend_refuses_what_it_does_not_offer(settings, plan, message):
    exp = small_mlp_experiment(**settings)
    if message is None:
        assert exp.plan(**plan).mesh_shape == (4, 1)
        return
    with pytest.raises(GpkError, match=message):
        exp.plan(**plan)


def test_jax_refuses_a_dataset_builder_without_tensorflow_and_validation(monkeypatch):
    exp = gpk.Experiment(model=small_mlp, data=lambda: None, progress=False)
    assert exp.plan("single", 1, backend="jax").data.kind == "dataset_builder"  # read as NumPy
    import importlib.util

    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "tensorflow" else found(name)
    )
    with pytest.raises(GpkError, match="reads with TensorFlow, not installed here"):
        exp.plan("single", 1, backend="jax")
    with pytest.raises(GpkError, match="validation during training"):
        small_mlp_experiment(validation=0.25).plan("single", 1, backend="jax")


def test_a_run_takes_the_backend_as_a_list_of_one_as_the_command_line_gives_it():
    spec = small_mlp_experiment().plan("tensor", 4, backend=["jax"], mesh=[2, 2])
    assert (spec.backend, spec.mesh_shape) == ("jax", (2, 2))
    identity = spec.result_identity()
    assert (identity["backend"], identity["mesh"]) == ("jax", "2x2")


def test_compare_on_both_backends_leaves_out_what_each_lacks_and_says_so(fake_machine, capsys):
    cmp = small_mlp_experiment().compare(
        ["single", "data", "model", "tensor"], [1, 2], backend=["tensorflow", "jax"]
    )
    planned = [(s.backend, s.strategy, s.devices.count) for s in fake_machine.specs]
    assert planned == [
        ("tensorflow", "single", 1), ("tensorflow", "data", 1), ("tensorflow", "data", 2),
        ("tensorflow", "pipeline", 1), ("tensorflow", "pipeline", 2),
        ("jax", "single", 1), ("jax", "data", 1), ("jax", "data", 2),
        ("jax", "pipeline", 1), ("jax", "pipeline", 2), ("jax", "tensor", 2),
    ]  # fmt: skip
    said = capsys.readouterr().out
    assert "tensorflow: tensor left out" in said and "jax:" not in said
    table = cmp.table
    assert list(table["backend"]).count("jax") == 6
    # each backend's speedups are against its own single run
    singles = table[table["strategy"] == "single"]
    assert list(singles["speedup"]) == [1.0, 1.0]


def test_a_strategy_no_asked_backend_offers_is_refused_not_left_out():
    with pytest.raises(GpkError, match="not available on backend='tensorflow'"):
        small_mlp_experiment().compare(["single", "tensor"], [1, 2])


def test_the_mesh_option_reads_two_numbers():
    assert mesh("2x2") == (2, 2) and mesh("1,4") == (1, 4)
    with pytest.raises(Exception, match="mesh='2x' is not two whole numbers"):
        mesh("2x", "mesh")
