"""A training step counted without allocating its weights (`worker/jax/abstract_count.py`), held
against the published closed forms on keras-hub's GPT-2 backbone at mid sizes.

The counts run in one fresh process with Keras on JAX and TensorFlow kept out (keras-hub would
import it), as `test_without_tensorflow.py` does; it prints its figures as JSON.
"""

from __future__ import annotations

import textwrap

import pytest

from .json_child import run_json_script

pytestmark = pytest.mark.slow

# (layers, width, heads, sequence, batch): FLOPs and memory on a wide model (3.2 GB of float32
# weights, 9.7 GB more of gradients and Adam slots, none of them allocated), activations on a
# narrower one at 16 bits with dropout.
WIDE = (4, 4096, 32, 256, 2)
NARROW = (3, 512, 8, 256, 2)
VOCABULARY = 1000

SCRIPT = textwrap.dedent(
    """
    import json, os, resource, sys

    from gpu_parallel_kit.worker.jax.abstract_count import count_abstract

    def gpt(layers, width, heads, sequence):
        def build():
            import keras_hub

            return keras_hub.models.GPT2Backbone(
                vocabulary_size=VOCABULARY, num_layers=layers, num_heads=heads,
                hidden_dim=width, intermediate_dim=4 * width, max_sequence_length=sequence,
                dropout=0.1,
            )
        inputs = {"token_ids": ((sequence,), "int32"), "padding_mask": ((sequence,), "int32")}
        return build, inputs

    out = {}
    L, h, a, s, b = WIDE
    build, inputs = gpt(L, h, a, s)
    out["wide"] = count_abstract(build, inputs, b, precision="float32", optimizer="adam")
    out["wide"]["activations"] = None
    out["wide_peak"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    L, h, a, s, b = NARROW
    build, inputs = gpt(L, h, a, s)
    narrow = count_abstract(build, inputs, b, precision="mixed_bfloat16", optimizer=None)
    out["narrow"] = narrow

    def compiled():  # a builder that compiles with an optimizer of its own, as users write
        import keras

        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32)])
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        return model

    out["compiled"] = count_abstract(compiled, ((64,), "float32"), 8, targets=((32,), "float32"))
    out["compiled"]["activations"] = None
    print("JSON" + json.dumps(out, default=str))
    """
)


@pytest.fixture(scope="module")
def counts(tmp_path_factory):
    script = f"WIDE = {WIDE}\nNARROW = {NARROW}\nVOCABULARY = {VOCABULARY}\n" + SCRIPT
    return run_json_script(
        script, tmp_path_factory.mktemp("abstract_count"), without_tensorflow=True, timeout=600
    )


def _megatron(layers, width, sequence, batch):
    """Narayanan et al. (SC 2021), FLOPs per iteration without recomputation and without the
    logits' V term (the backbone has no language-model head)."""
    return 72 * batch * sequence * layers * width**2 * (1 + sequence / (6 * width))


def test_the_flops_of_a_step_are_megatrons_closed_form(counts):
    layers, width, _, sequence, batch = WIDE
    ratio = counts["wide"]["flops"] / _megatron(layers, width, sequence, batch)
    # The closed form counts the matmuls alone; the count adds what they leave out: layer norms,
    # GeLU, softmax, dropout, residual adds and Adam's update, a few FLOPs per element of
    # s·h and a·s² tensors (and per parameter) against the matmuls' 72·s·h² per layer: under
    # 1 % at width 4,096 (4 % at width 512, measured), never below the form.
    assert 1.0 <= ratio <= 1.01, ratio


def test_the_parameters_are_counted_and_none_is_allocated(counts):
    layers, width, _, sequence, _ = WIDE
    blocks = layers * (12 * width**2 + 13 * width)
    embeddings = (VOCABULARY + sequence) * width
    assert counts["wide"]["parameters"] == blocks + embeddings + 2 * width
    weights = 4 * counts["wide"]["parameters"]  # float32: 3.2 GB, and Adam's two slots beside
    assert counts["wide_peak"] < weights / 2, (counts["wide_peak"], weights)
    assert counts["wide"]["optimizer"] == "Adam"


def test_the_activations_a_block_keeps_are_korthikantis(counts):
    layers, width, heads, sequence, batch = NARROW
    kept = counts["narrow"]["activations"]
    sbh = sequence * batch * width
    scores = heads * sequence**2 * batch
    blocks = {k: v for k, v in kept["by_layer"].items() if k.startswith("transformer_layer_")}
    assert len(blocks) == layers
    per_layer = sum(blocks.values()) / layers
    # Korthikanti et al. (2022), at 16 bits with dropout: s·b·h·(34 + 5·a·s/h) bytes per layer.
    # The trace keeps the same tensors, entry by entry, but Keras computes its layer norms in
    # float32: each keeps a float32 copy of its input and of its normalised values beside its
    # 16-bit output (4 + 4 bytes for the formula's 2: +12·s·b·h per layer), and their
    # per-row statistics (a fraction of a percent).
    expected = sbh * (34 + 12) + 5 * scores
    assert per_layer == pytest.approx(expected, rel=0.01), (per_layer, expected)
    korthikanti = sbh * 34 + 5 * scores
    assert 1.0 < per_layer / korthikanti < 1.3
    # the 5·a·s²·b term: the softmax (2 bytes), its dropout mask (1) and dropout's output (2)
    attention = sum(size for kind, size in kept["by_kind"].items() if kind.endswith("scores"))
    masks = kept["by_kind"]["self_attention/dropout mask"]
    assert attention + masks == pytest.approx(5 * scores * layers, rel=0.01)
    assert counts["narrow"]["optimizer"] is None
    assert "no flash attention" in counts["narrow"]["attention"]


def test_the_softmax_beside_its_exponentials_is_recomputed_not_kept(counts):
    rows = counts["narrow"]["activations"]["residuals"]
    softmax = [r for r in rows if r["kind"] == "self_attention/softmax scores"]
    assert sum(r["role"] == "kept" for r in softmax) == NARROW[0]  # one (a, s, s) per layer
    saved = counts["narrow"]["activations"]["saved_bytes"]
    assert saved > counts["narrow"]["activations"]["kept_bytes"]


def test_a_builder_that_compiles_keeps_its_own_optimizer(counts):
    assert counts["compiled"]["optimizer"] == "SGD"
    assert counts["compiled"]["parameters"] == 64 * 32 + 32
    # forward 2·b·64·32 and the kernel's gradient as much (the inputs get none), then the
    # loss and SGD's update: a few FLOPs per output and parameter
    assert 4 * 8 * 64 * 32 <= counts["compiled"]["flops"] <= 1.2 * 4 * 8 * 64 * 32
