"""Built-in models small enough to train on a 2-core CPU in seconds, shaped for the synthetic
sets."""

from __future__ import annotations

import keras

from ..runs.description.synthetic_data import synthetic_spec


def build_mlp() -> keras.Model:
    spec = synthetic_spec("tabular")
    return keras.Sequential(
        [
            keras.Input(spec.input_shape),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(spec.classes),
        ],
        name="mlp",
    )


def build_cnn() -> keras.Model:
    spec = synthetic_spec("images")
    return keras.Sequential(
        [
            keras.Input(spec.input_shape),
            keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(spec.classes),
        ],
        name="cnn",
    )


def build_transformer() -> keras.Model:
    """One encoder block over token ids: embedding, self-attention, feed-forward, pooling."""
    spec = synthetic_spec("tokens")
    width = 64
    tokens = keras.Input(spec.input_shape, dtype="int32")
    x = keras.layers.Embedding(spec.integer_inputs, width)(tokens)
    attended = keras.layers.MultiHeadAttention(num_heads=4, key_dim=width // 4)(x, x)
    x = keras.layers.LayerNormalization()(x + attended)
    fed = keras.layers.Dense(width * 2, activation="relu")(x)
    x = keras.layers.LayerNormalization()(x + keras.layers.Dense(width)(fed))
    x = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(tokens, keras.layers.Dense(spec.classes)(x), name="transformer")


BUILDERS = {"mlp": build_mlp, "cnn": build_cnn, "transformer": build_transformer}


def default_compile_args() -> dict:
    """Built-in models come uncompiled and output logits; this is how they train by default."""
    return {
        "optimizer": "adam",
        "loss": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        "metrics": ["accuracy"],
    }
