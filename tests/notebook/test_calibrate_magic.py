"""`%gpk calibrate`: the flags of `gpk calibrate`, the model a name in the notebook, the
calibration back with its rows and curves shown; a mistake is one line. The probe is stood in
for (`tests/jax/test_calibration.py` runs the real one)."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from gpu_parallel_kit.analysis.cost_model.device_calibration import DeviceCalibration
from tests.analysis.cost_model.test_device_calibration import calibration


@pytest.fixture
def probed(monkeypatch):
    asked = {}

    def calibrate(**keywords):
        asked.update(keywords)
        return calibration()

    monkeypatch.setattr("gpu_parallel_kit.api.calibrate", calibrate)
    return asked


def test_percent_gpk_calibrate_returns_the_calibration(shell, probed):
    def build_model():
        return None

    shell.user_ns["build_model"] = build_model
    found = shell.run_line_magic("gpk", "calibrate --backend jax --model build_model --budget 5")
    assert isinstance(found, DeviceCalibration)
    assert probed["model"] is build_model and probed["budget_s"] == 5.0
    assert probed["backend"] == "jax" and probed["save"] is True


def test_percent_gpk_calibrate_refuses_bad_input_in_one_line(shell, probed):
    with pytest.raises(UsageError, match="model 'nowhere' is not defined in this notebook"):
        shell.run_line_magic("gpk", "calibrate --model nowhere")
    assert not probed  # refused before any probe
