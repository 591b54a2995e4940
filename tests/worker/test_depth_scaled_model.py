"""A keras-hub config copied for a rebuild at another depth (`worker/depth_scaled_model.py`)."""

from __future__ import annotations

from gpu_parallel_kit.worker.depth_scaled_model import plain_copy


class Tracked(list):
    """A list as Keras tracks a layer's list attribute: its deep copy copies the layer."""

    def __deepcopy__(self, memo):
        raise AssertionError("deep-copied the layer a tracked list holds")


def test_a_config_is_copied_with_plain_lists_never_the_layer_they_track():
    config = {
        "num_layers": 24,
        "mlp_only_layers": Tracked([0]),
        "backbone": {"config": {"layer_types": Tracked(["full_attention"]), "shape": (1, 2)}},
    }
    copied = plain_copy(config)
    assert copied == config
    assert type(copied["mlp_only_layers"]) is list
    assert copied["backbone"]["config"]["shape"] == (1, 2)
    copied["backbone"]["config"]["layer_types"].append("x")
    assert config["backbone"]["config"]["layer_types"] == ["full_attention"]
