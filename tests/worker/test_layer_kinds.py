"""keras.applications networks read as the sharding rules read them: every one of these has
convolution (or dense) pairs the kit's own layout splits over a tensor axis, so the plan search
lists tensor plans of it (`ModelCard.tensor_splits`)."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.sharding.layout import derive_layout

pytestmark = pytest.mark.slow  # Keras and its backend, and four networks built

NETWORKS = {
    "resnet50": dict(),
    "mobilenet_v2": dict(input_shape=(96, 96, 3), alpha=0.35),
    "vgg16": dict(input_shape=(32, 32, 3), classes=10),
    "densenet121": dict(input_shape=(32, 32, 3)),
}
BUILDERS = {"resnet50": "ResNet50", "mobilenet_v2": "MobileNetV2", "vgg16": "VGG16",
            "densenet121": "DenseNet121"}  # fmt: skip


@pytest.mark.parametrize("name", list(NETWORKS))
def test_a_keras_applications_network_has_pairs_the_layout_splits(name):
    import keras

    from gpu_parallel_kit.worker.layers import read_weights

    build = getattr(keras.applications, BUILDERS[name])
    layers = read_weights(build(weights=None, **NETWORKS[name]))
    kinds = {layer.kind for layer in layers}
    assert {"convolution", "per_channel"} <= kinds
    layout = derive_layout(layers, 2)
    columns = [p for p in layout.sharded if p.role == "column" and p.path.endswith("/kernel")]
    rows = [p for p in layout.sharded if p.role == "row"]
    assert columns and len(columns) == len(rows)
    assert all(p.axes[-1] == "model" for p in columns)
