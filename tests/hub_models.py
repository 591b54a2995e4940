"""keras-hub backbones built tiny from a config (random weights, nothing downloaded), each with
a small classification head, as a user wraps one; and dicts of token arrays to feed them.

Importable, so workers unpickle the builders by reference. keras-hub is imported inside each
builder: the test process itself never imports it.
"""

from __future__ import annotations

import os

import numpy as np

SEQUENCE, VOCABULARY, CLASSES = 16, 96, 3
SIZE = dict(num_layers=2, hidden_dim=32, intermediate_dim=64)


def _classifier(backbone, names):
    import keras

    inputs = {name: keras.Input((SEQUENCE,), dtype="int32", name=name) for name in names}
    hidden = backbone(inputs)
    if isinstance(hidden, dict):  # BERT gives its sequence and its pooled output
        hidden = hidden["sequence_output"]
    pooled = keras.layers.GlobalAveragePooling1D(name="pool")(hidden)
    model = keras.Model(inputs, keras.layers.Dense(CLASSES, name="classes")(pooled))
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def gpt2():
    import keras_hub

    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=VOCABULARY, num_heads=2, max_sequence_length=SEQUENCE, dropout=0.0, **SIZE
    )
    return _classifier(backbone, INPUTS["gpt2"])


def bert():
    import keras_hub

    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=VOCABULARY, num_heads=2, max_sequence_length=SEQUENCE, dropout=0.0, **SIZE
    )
    return _classifier(backbone, INPUTS["bert"])


def llama():
    import keras_hub

    backbone = keras_hub.models.LlamaBackbone(
        vocabulary_size=VOCABULARY, num_query_heads=4, num_key_value_heads=2, **SIZE
    )
    return _classifier(backbone, INPUTS["llama"])


def gemma():
    import keras_hub

    backbone = keras_hub.models.GemmaBackbone(
        vocabulary_size=VOCABULARY, num_query_heads=2, num_key_value_heads=1, head_dim=16, **SIZE
    )
    return _classifier(backbone, INPUTS["gemma"])


def mistral():
    import keras_hub

    backbone = keras_hub.models.MistralBackbone(
        vocabulary_size=VOCABULARY,
        num_query_heads=4,
        num_key_value_heads=2,
        sliding_window=8,
        **SIZE,
    )
    return _classifier(backbone, INPUTS["mistral"])


def mixtral():
    import keras_hub

    backbone = keras_hub.models.MixtralBackbone(
        vocabulary_size=VOCABULARY,
        num_query_heads=4,
        num_key_value_heads=2,
        num_experts=2,
        top_k=1,
        sliding_window=8,
        **SIZE,
    )
    return _classifier(backbone, INPUTS["mixtral"])


# The long-sequence options' model: a tiny Llama 3 at 256 tokens, or as many as
# GPK_LONG_SEQUENCE says (read again where a counting child imports this module).
LONG_SEQUENCE = int(os.environ.get("GPK_LONG_SEQUENCE", "256"))


def llama3_long():
    """keras-hub's Llama 3 built tiny, at `LONG_SEQUENCE` tokens a sample."""
    import keras
    import keras_hub

    backbone = keras_hub.models.Llama3Backbone(
        vocabulary_size=VOCABULARY, num_query_heads=4, num_key_value_heads=2, **SIZE
    )
    names = INPUTS["llama"]
    inputs = {name: keras.Input((LONG_SEQUENCE,), dtype="int32", name=name) for name in names}
    pooled = keras.layers.GlobalAveragePooling1D(name="pool")(backbone(inputs))
    model = keras.Model(inputs, keras.layers.Dense(CLASSES, name="classes")(pooled))
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def long_tokens(samples: int = 64, seed: int = 0):
    """(x, y) for `llama3_long`: token ids and a padding mask of `LONG_SEQUENCE` each."""
    rng = np.random.default_rng(seed)
    x = {
        "token_ids": rng.integers(1, VOCABULARY, (samples, LONG_SEQUENCE)).astype("int32"),
        "padding_mask": np.ones((samples, LONG_SEQUENCE), "int32"),
    }
    return x, rng.integers(0, CLASSES, samples).astype("int32")


INPUTS = {
    "gpt2": ("token_ids", "padding_mask"),
    "bert": ("token_ids", "segment_ids", "padding_mask"),
    "llama": ("token_ids", "padding_mask"),
    "gemma": ("token_ids", "padding_mask"),
    "mistral": ("token_ids", "padding_mask"),
    "mixtral": ("token_ids", "padding_mask"),
    "gemma4": ("token_ids", "padding_mask", "position_ids"),
}


def tokens(model: str, samples: int = 128, seed: int = 0):
    """(x, y): a dict of int32 arrays by input name, as `fit` takes a keras-hub model's inputs,
    and a class per sequence."""
    rng = np.random.default_rng(seed)
    x = {}
    for name in INPUTS[model]:
        if name == "token_ids":
            x[name] = rng.integers(1, VOCABULARY, (samples, SEQUENCE)).astype("int32")
        elif name == "position_ids":
            x[name] = np.tile(np.arange(SEQUENCE, dtype="int32"), (samples, 1))
        elif name == "segment_ids":
            x[name] = np.zeros((samples, SEQUENCE), "int32")
        else:
            x[name] = np.ones((samples, SEQUENCE), "int32")
    return x, rng.integers(0, CLASSES, samples).astype("int32")
