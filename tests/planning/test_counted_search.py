"""`gpk.search` end to end on a tiny keras-hub GPT-2 backbone: counted in the JAX child, its
structure read off the backbone, ranked. About 25 s on two cores (the JAX server's start and
the count), hence slow."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_parallel_kit as gpk

pytestmark = pytest.mark.slow

LAYERS, WIDTH, HEADS, SEQUENCE = 4, 64, 4, 32


def build_gpt2():
    import keras_hub

    return keras_hub.models.GPT2Backbone(
        vocabulary_size=256, num_layers=LAYERS, num_heads=HEADS, hidden_dim=WIDTH,
        intermediate_dim=4 * WIDTH, max_sequence_length=SEQUENCE, dropout=0.0,
    )  # fmt: skip


def test_a_gpt2_backbone_is_counted_read_and_ranked(tmp_path, monkeypatch):
    monkeypatch.setenv("GPK_CACHE_DIR", str(tmp_path))
    sample = {"token_ids": np.zeros(SEQUENCE, "int32"), "padding_mask": np.ones(SEQUENCE, "int32")}
    cluster = gpk.GPUCluster("a100", nodes=2, per_node=8)
    found = gpk.search(build_gpt2, sample, cluster, global_batch=64, progress=False)
    card = found.card
    assert (card.layers, card.hidden, card.heads, card.sequence) == (LAYERS, WIDTH, HEADS, SEQUENCE)
    blocks = LAYERS * (12 * WIDTH**2 + 13 * WIDTH)
    assert card.parameters == blocks + (256 + SEQUENCE) * WIDTH + 2 * WIDTH
    assert card.flops_per_sample > 72 * SEQUENCE * LAYERS * WIDTH**2  # Megatron's matmuls, and more
    assert 0 < card.activation_bytes < card.flops_per_sample
    fitting = found.table[found.table["fits"]]
    assert found.best.step_time_s == fitting["step_time_s"].min()
    assert "read off its GPT2Backbone" in found.note
    assert f"at 1 and 2 blocks and extrapolated to {LAYERS}" in found.note  # counted by depth


def build_llama():
    import keras_hub

    return keras_hub.models.Llama3Backbone(
        vocabulary_size=256, num_layers=LAYERS, num_query_heads=HEADS, hidden_dim=WIDTH,
        intermediate_dim=4 * WIDTH, num_key_value_heads=2,
    )  # fmt: skip


def test_a_grouped_query_backbone_gives_its_kv_heads_and_its_scores(tmp_path, monkeypatch):
    monkeypatch.setenv("GPK_CACHE_DIR", str(tmp_path))
    sample = {"token_ids": np.zeros(SEQUENCE, "int32"), "padding_mask": np.ones(SEQUENCE, "int32")}
    cluster = gpk.GPUCluster("h100", nodes=1, per_node=8)
    found = gpk.search(build_llama, sample, cluster, global_batch=16, progress=False)
    card = found.card
    assert (card.kv_heads, card.vocabulary, card.heads) == (2, 256, HEADS)
    # The trace's (s, s) residuals: at least one float per head and score, within the block's
    assert HEADS * SEQUENCE**2 * 2 <= card.score_bytes < card.activation_bytes
    assert set(found.table["attention"]) == {"flash"}


CLASSES = 3
H100S = gpk.GPUCluster("h100", nodes=1, per_node=8)
# What Keras, JAX and TensorFlow say in their own words; never part of the kit's sentence.
LIBRARY_TEXT = ("JitTracer", "not connected", "Invalid input shape", "Received", "Error:")


def build_token_classifier():
    """Two Transformer blocks over token ids, a class per sequence, trained on class indices."""
    import keras

    tokens = keras.Input((SEQUENCE,), dtype="int32", name="token_ids")
    x = keras.layers.Embedding(256, WIDTH)(tokens)
    for _ in range(2):
        attended = keras.layers.MultiHeadAttention(HEADS, WIDTH // HEADS)(x, x)
        x = keras.layers.LayerNormalization()(x + attended)
        fed = keras.layers.Dense(4 * WIDTH, activation="gelu")(x)
        x = keras.layers.LayerNormalization()(x + keras.layers.Dense(WIDTH)(fed))
    pooled = keras.layers.GlobalAveragePooling1D()(x)
    model = keras.Model(tokens, keras.layers.Dense(CLASSES)(pooled))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def build_mlp_classifier():
    import keras

    features = keras.Input((16,), name="features")
    hidden = keras.layers.Dense(32, activation="relu")(features)
    model = keras.Model(features, keras.layers.Dense(CLASSES)(hidden))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _labels(samples):
    return np.random.default_rng(0).integers(0, CLASSES, samples)


def _refusal(search, *args, **kwargs):
    with pytest.raises(gpk.GpkError) as raised:
        search(*args, **kwargs)
    sentence = str(raised.value)
    assert not any(text in sentence for text in LIBRARY_TEXT), sentence
    return sentence


def test_a_transformer_classifier_on_class_indices_is_planned(tmp_path, monkeypatch):
    monkeypatch.setenv("GPK_CACHE_DIR", str(tmp_path))
    tokens = np.zeros((128, SEQUENCE), "int32")
    exp = gpk.Experiment(build_token_classifier, (tokens, _labels(128)), backend="jax")
    found = exp.search(gpus=H100S, global_batch=64, progress=False)
    assert (found.card.layers, found.card.hidden, found.card.heads) == (2, WIDTH, HEADS)
    assert found.best.fits and "read off its 2 MultiHeadAttention layers" in found.note


def test_a_classifier_that_is_no_transformer_is_planned_layer_by_layer(tmp_path, monkeypatch):
    monkeypatch.setenv("GPK_CACHE_DIR", str(tmp_path))
    features = np.zeros((128, 16), "float32")
    data = (features, _labels(128))
    exp = gpk.Experiment(build_mlp_classifier, data, batch_size=64, backend="jax")
    # An experiment's search plans it layer by layer: its dense pair splits over a tensor axis.
    layered = exp.search(gpus=H100S, global_batch=64, progress=False)
    assert layered.best.fits and "each layer's work counted" in layered.note
    table = layered.table
    assert (table["tensor"] > 1).any() and (table["sharding"] == "fsdp").any()
    assert list(layered.layers()["kind"]) == ["Dense", "Dense"]
    # Searched alone, with a class index a sample, the same model is planned alike.
    alone = gpk.search(
        build_mlp_classifier, np.zeros(16, "float32"), H100S, 64, labels=np.int32(0),
        progress=False,
    )  # fmt: skip
    assert alone.best.fits and (alone.table["tensor"] > 1).any()
    # The count itself, on integer labels, worked: given its structure, the search plans it.
    given = exp.search(gpus=H100S, global_batch=64, blocks=2, hidden=32, heads=1, progress=False)
    assert given.best.fits and "kept from an earlier count" in given.note
    # Searched alone, the classifier's sparse loss needs one sample of its labels.
    structure = dict(blocks=2, hidden=32, heads=1, progress=False)
    one = np.zeros(16, "float32")
    sentence = _refusal(gpk.search, build_mlp_classifier, one, H100S, 64, **structure)
    assert sentence.endswith("pass one sample of the labels, e.g. labels=np.int32(0)")
    found = gpk.search(build_mlp_classifier, one, H100S, 64, labels=np.int32(0), **structure)
    assert found.best.fits


def test_a_sample_the_model_does_not_take_is_one_sentence_of_the_kit(tmp_path, monkeypatch):
    monkeypatch.setenv("GPK_CACHE_DIR", str(tmp_path))
    structure = dict(blocks=2, hidden=32, heads=1, progress=False)
    batch = np.zeros((4, 16), "float32")
    sentence = _refusal(gpk.search, build_mlp_classifier, batch, H100S, 64, **structure)
    assert sentence.endswith(
        "inputs= has shape (4, 16), a batch of 4, but the model takes one sample of shape "
        "(16,); give one sample without the batch axis (x[0], not x)"
    )
    wrong = {"wrong": np.zeros(16, "float32")}
    sentence = _refusal(gpk.search, build_mlp_classifier, wrong, H100S, 64, **structure)
    assert "inputs= is keyed 'wrong' but the model's inputs are named 'features'" in sentence
    assert "inputs={'features': ...}" in sentence
    exp = gpk.Experiment(
        build_mlp_classifier, ({"wrong": np.zeros((8, 16), "float32")}, _labels(8)), backend="jax"
    )
    sentence = _refusal(exp.search, gpus=H100S, global_batch=64, **structure)
    assert "the data's inputs are named 'wrong' but the model's are named 'features'" in sentence


def test_a_search_stopped_while_counting_ends_its_child_and_keeps_nothing(tmp_path, monkeypatch):
    import threading
    import time

    from gpu_parallel_kit.planning import step_count

    monkeypatch.setenv("GPK_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(step_count, "_counted", {})
    sample = {"token_ids": np.zeros(SEQUENCE, "int32"), "padding_mask": np.ones(SEQUENCE, "int32")}
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()  # once the counting child has started
    started = time.monotonic()
    with pytest.raises(step_count.SearchCancelled, match="the search was stopped while counting"):
        gpk.search(build_gpt2, sample, gpk.GPUCluster("a100", nodes=2), global_batch=64,
                   progress=False, cancel=cancel)  # fmt: skip
    assert time.monotonic() - started < 30  # not the whole count
    assert not list(tmp_path.glob("plan_counts/*.json"))  # nothing kept
