"""The data-parallel communication figures hang together on virtual devices."""

from __future__ import annotations

import pytest

import gpu_parallel_kit as gpk

pytestmark = pytest.mark.slow


def test_exposed_all_reduce_is_bounded_by_the_standalone_one_and_the_control_is_noise():
    exp = gpk.Experiment(
        model="mlp", samples=2048, batch_size=256, epochs=1, steps_per_epoch=6, progress=False
    )
    control, pair = exp.compare(["data"], [1, 2]).results
    assert control.ok and pair.ok, (control.reason, pair.reason)
    gradient_bytes = pair.extra["parameter_bytes"]
    assert pair.comm_bytes == gradient_bytes
    assert control.comm_bytes == 0  # one replica has nothing to add its gradients to
    # Reduction to one device: the other replica sends its gradients and gets the sum back.
    assert pair.extra["traffic_bytes_per_device"] == 2 * gradient_bytes
    assert control.extra["traffic_bytes_per_device"] == 0
    noise = control.extra["comm_noise_s"] + pair.extra["comm_noise_s"]
    # Figures below their noise are shown as such; the signed measurement is in extra.
    control_comm, pair_comm = _raw(control), _raw(pair)
    assert control.comm_time_s is None and control.extra["comm_below_noise"]
    assert abs(control_comm) <= noise + 0.1 * control.step_time_s
    assert pair_comm <= pair.extra["standalone_all_reduce_s"] + noise
    assert pair.extra["standalone_all_reduce_s"] > 0
    pair_share = pair.extra.get("comm_share_raw", pair.comm_share)
    assert pair_share == pytest.approx(pair_comm / pair.step_time_s)
    assert "shared cores" in pair.extra["comm_method"]


def _raw(result):
    """The signed exposed communication, whether or not it fell below its noise."""
    return result.extra.get("comm_time_raw_s", result.comm_time_s)
