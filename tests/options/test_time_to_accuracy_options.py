"""Time-to-accuracy options from the API, the CLI and the magic's request: every form of
validation data, the per-run overrides, and one-sentence errors before any worker starts."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.cli.commands import main
from gpu_parallel_kit.notebook.names import resolve_validation
from gpu_parallel_kit.options.request import Request
from gpu_parallel_kit.runs.description.accuracy_target import Target
from gpu_parallel_kit.runs.description.validation_data import holdout_indices
from tests.builders import FEATURES, small_data, small_mlp, small_mlp_experiment

# A CPU-only machine; workers are replaced by instant results, and their specs kept.
pytestmark = pytest.mark.usefixtures("fake_machine")


def _stored(source):
    x_path, y_path = source.paths
    return np.load(x_path), np.load(y_path)


def test_validation_arrays_are_stored_beside_the_training_arrays():
    xv, yv = small_data(40, seed=1)
    exp = small_mlp_experiment(validation=(xv, yv))
    validation = exp.training.validation
    assert validation.kind == "arrays" and validation.samples == 40
    assert validation.paths[0] != exp.data.paths[0]
    np.testing.assert_array_equal(_stored(validation)[0], xv)
    assert exp.data.samples == 256


def test_a_fraction_is_held_out_and_left_out_of_the_training_data():
    x, y = small_data()
    exp = small_mlp_experiment(data=(x, y), validation=0.25)
    train_x, _ = _stored(exp.data)
    val_x, _ = _stored(exp.training.validation)
    assert (len(train_x), len(val_x)) == (192, 64)
    rows = {row.tobytes() for row in train_x}
    assert not any(row.tobytes() in rows for row in val_x)
    assert {row.tobytes() for row in x} == rows | {row.tobytes() for row in val_x}


def test_the_held_out_samples_depend_on_the_seed_only():
    assert np.array_equal(holdout_indices(100, 0.1, 3)[1], holdout_indices(100, 0.1, 3)[1])
    assert not np.array_equal(holdout_indices(100, 0.1, 3)[1], holdout_indices(100, 0.1, 4)[1])


def test_a_fraction_of_a_built_in_set_is_held_out_too():
    exp = small_mlp_experiment(model="mlp", data="tabular", samples=400, validation=0.1)
    assert exp.data.kind == "arrays" and exp.data.samples == 360
    assert exp.training.validation.samples == 40


def test_a_dataset_builder_is_validation_data():
    def validation_set():
        raise AssertionError("built in the worker, not here")

    exp = small_mlp_experiment(validation=validation_set)
    assert exp.training.validation.kind == "dataset_builder"


@pytest.mark.parametrize(
    ("validation", "error", "message"),
    [
        (1.5, gpk.GpkError, "validation=1.5 is not a fraction between 0 and 1; use e.g. 0.1"),
        (0.0, gpk.GpkError, "is not a fraction between 0 and 1"),
        (0.001, gpk.GpkError, "holds out 0; leave at least one sample on each side"),
        (True, TypeError, "validation=True is not validation data"),
        ("tabular", TypeError, "validation= got str"),
        ((np.zeros((4, 3)), np.zeros(4)), gpk.GpkError, r"shape \(3,\) per sample but"),
        ((np.zeros((4, FEATURES)), np.zeros(3)), gpk.GpkError, "has 4 inputs but 3 targets"),
        ((np.zeros((0, FEATURES)), np.zeros(0)), gpk.GpkError, "is empty"),
    ],
)
def test_bad_validation_is_one_sentence(validation, error, message):
    with pytest.raises(error, match=message) as raised:
        small_mlp_experiment(validation=validation)
    assert "\n" not in str(raised.value)


def test_a_fraction_of_a_dataset_builder_is_refused():
    with pytest.raises(gpk.GpkError, match="pass validation= a function returning"):
        small_mlp_experiment(data=lambda: None, validation=0.1)


def test_a_validation_target_needs_validation_data():
    with pytest.raises(gpk.GpkError, match="needs validation data; pass validation="):
        small_mlp_experiment(target={"val_accuracy": 0.9})
    with pytest.raises(gpk.GpkError, match="needs validation data"):
        small_mlp_experiment().plan("single", 1, target="val_loss<=0.3")
    assert small_mlp_experiment(target={"loss": 0.5}).training.target == Target(
        "loss", 0.5, "below"
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"lr_scaling": "cubic"}, "lr_scaling='cubic' is not known"),
        ({"warmup_epochs": 2}, "warmup_epochs=2 is longer than the training"),
        ({"validation_every_steps": 0}, "validation_every_steps=0 is too few"),
    ],
)
def test_bad_convergence_options_are_one_sentence(settings, message):
    with pytest.raises(gpk.GpkError, match=message):
        small_mlp_experiment(**settings)


def test_compare_options_override_the_experiments_for_every_run(fake_machine):
    exp = small_mlp_experiment(validation=0.25, batch_size=16, epochs=2)
    cmp = exp.compare(
        strategies=["single", "data"],
        devices=[1, 2, 4],
        scaling="weak",
        lr_scaling="linear",
        warmup_epochs=1,
        target={"val_accuracy": 0.9},
        deterministic=True,
    )
    table = cmp.table
    assert list(table["global_batch"]) == [16, 16, 32, 64]
    assert list(table["lr_factor"]) == [1.0, 1.0, 2.0, 4.0]
    assert set(table["lr_scaling"]) == {"linear"} and set(table["scaling"]) == {"weak"}
    assert set(table["target"]) == {"val_accuracy >= 0.9"}
    assert all(spec.training.deterministic for spec in fake_machine.specs)
    assert all(spec.training.warmup_epochs == 1 for spec in fake_machine.specs)
    assert exp.training.scaling == "strong" and exp.training.lr_scaling == "none"


def test_strong_scaling_keeps_the_rate_even_with_a_rule(fake_machine):
    cmp = small_mlp_experiment().compare(["single", "data"], [1, 2], lr_scaling="linear")
    assert set(cmp.table["lr_factor"]) == {1.0}
    assert "Strong scaling keeps the global batch" in cmp.convergence


def test_cli_options_reach_the_experiment(fake_machine, capsys):
    argv = ["compare", "--devices", "1", "2", "--no-progress", "--scaling", "weak"]
    argv += ["--lr-scaling", "sqrt", "--warmup-epochs", "0.5", "--target", "val_accuracy=0.9"]
    argv += ["--validation-split", "0.1", "--validation-every-steps", "5", "--deterministic"]
    assert main(argv) == 0
    training = fake_machine.specs[-1].training
    assert training.lr_scaling == "sqrt" and training.warmup_epochs == 0.5
    assert training.target == Target("val_accuracy", 0.9, "above")
    assert training.validation is not None and training.validation_every_steps == 5
    assert training.deterministic
    assert "to_target_s" in capsys.readouterr().out


def test_cli_validation_data_from_an_npz_file(fake_machine, tmp_path):
    path = tmp_path / "val.npz"
    np.savez(path, x=np.zeros((16, 32), dtype="float32"), y=np.zeros(16, dtype="int32"))
    assert main(["run", "--no-progress", "--validation-data", str(path)]) == 0
    assert fake_machine.specs[-1].training.validation.samples == 16


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["run", "--target", "val_widgets=3"], "cannot tell whether it should go up or down"),
        (["run", "--target", "val_accuracy=0.9"], "needs validation data"),
        (["run", "--validation-split", "2"], "not a fraction between 0 and 1"),
        (["run", "--lr-scaling", "cubic"], "cubic"),
        (["run", "--warmup-epochs", "-1"], "negative"),
        (["run", "--validation-data", "missing.npz"], "--validation-data 'missing.npz'"),
        (["run", "--validation-split", "0.1", "--validation-data", "v.npz"], "not allowed"),
    ],
)
def test_cli_bad_convergence_options_are_one_line(argv, named, capsys):
    assert main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err, err


def test_the_magic_request_carries_the_options_to_the_experiment():
    x, y = small_data()
    xv, yv = small_data(40, seed=1)
    namespace = {"xv": xv, "yv": yv}
    assert resolve_validation(["0.2"], namespace) == 0.2
    assert resolve_validation(["xv", "yv"], namespace)[0] is xv
    with pytest.raises(gpk.GpkError, match="--validation nope is not defined"):
        resolve_validation(["nope", "yv"], namespace)
    request = Request(
        model=small_mlp,
        data=(x, y),
        batch_size=32,
        validation=(xv, yv),
        lr_scaling="linear",
        warmup_epochs=0.5,
        target="val_accuracy=0.9",
        deterministic=True,
    )
    training = request.experiment(progress=False).training
    assert training.validation.samples == 40 and training.lr_scaling == "linear"
    assert training.target == Target("val_accuracy", 0.9, "above") and training.deterministic
