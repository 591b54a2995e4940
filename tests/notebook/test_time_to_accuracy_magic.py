"""`%gpk compare` with the time-to-accuracy options, workers replaced by literal results."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from tests import builders


@pytest.fixture
def fake_runs(fake_machine):
    """Each run reaches 0.95 validation accuracy after one evaluation per epoch."""

    def run(spec):
        return builders.instant_result(
            spec,
            learning_rate=0.1 * spec.training.lr_factor(spec.global_batch),
            history_time_s=(1.0, 2.0),
            evaluations=(
                {"epoch": 1.0, "step": 4, "time_s": 1.0, "val_accuracy": 0.5, "val_loss": 1.0},
                {"epoch": 2.0, "step": 8, "time_s": 2.0, "val_accuracy": 0.95, "val_loss": 0.2},
            ),
        )

    fake_machine.answer(run)
    return fake_machine.specs


def test_compare_with_a_target_shows_the_time_to_it_and_the_curves(shell, fake_runs):
    x, y = builders.small_data()
    xv, yv = builders.small_data(40, seed=1)
    shell.user_ns.update(build_model=builders.small_mlp, x=x, y=y, xv=xv, yv=yv)
    line = (
        "compare build_model --data x y --validation xv yv --batch-size 32 --epochs 2 "
        "--devices 1 2 --scaling weak --lr-scaling linear --warmup-epochs 1 "
        "--target val_accuracy=0.9 --deterministic --no-progress"
    )
    cmp = shell.run_line_magic("gpk", line)
    training = fake_runs[-1].training
    assert training.validation.samples == 40 and training.deterministic
    assert training.lr_scaling == "linear" and training.warmup_epochs == 1.0
    table = cmp.table
    assert table["time_to_target_s"].tolist() == [2.0, 2.0, 2.0]
    assert table["learning_rate"].tolist() == pytest.approx([0.1, 0.1, 0.2])
    bundles = [o["data"] for o in shell.display_pub.outputs]
    html = next(b["text/html"] for b in bundles if "text/html" in b)
    assert "<th>to target</th>" in html and "2 s, epoch" in html and "learning rate" in html
    assert sum("image/png" in b for b in bundles) == 2  # the comparison and the curves


def test_a_fraction_and_a_bad_target_from_the_magic(shell, fake_runs):
    shell.user_ns.update(build_model=builders.small_mlp, data=builders.small_data())
    shell.run_line_magic(
        "gpk", "run build_model --data data --batch-size 32 --validation 0.25 --no-progress"
    )
    assert fake_runs[-1].training.validation.samples == 64
    with pytest.raises(UsageError, match="cannot tell whether it should go up or down"):
        shell.run_line_magic("gpk", "run build_model --data data --target val_widgets=3")
