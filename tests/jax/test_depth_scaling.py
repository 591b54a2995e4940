"""A Transformer counted at two small depths and extrapolated (`worker/jax/depth_scaling.py`),
held against the count at full depth; and the published runs' stored cards held against a
recount of the smallest.

The counts run in one fresh process with Keras on JAX and TensorFlow kept out (keras-hub would
import it), as `test_abstract_count.py` does. About 85 s on two shared cores: 13 s by depth,
17 s at 24 blocks, 10 s for the smallest published model, the rest starting Keras and JAX.
"""

from __future__ import annotations

import textwrap

import pytest

from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.planning import published_runs

from .json_child import run_json_script

# (layers, width, heads, sequence, vocabulary): a mid-width GPT at 24 blocks
MID = (24, 512, 8, 128, 1000)
SMALLEST = min(published_runs.stored_cards().items(), key=lambda kv: kv[1]["parameters"])

SCRIPT = textwrap.dedent(
    """
    import json, os, sys

    import keras
    from gpu_parallel_kit.worker.jax.abstract_count import count_abstract
    from gpu_parallel_kit.worker.jax.depth_scaling import INPUTS, count_by_depth, gpt_builder
    from gpu_parallel_kit.worker.jax.depth_scaling import gpt_card

    L, h, a, s, V = MID
    build = gpt_builder(h, a, 4 * h, s, V)
    inputs = {name: ((s,), "int32") for name in INPUTS}
    options = dict(
        precision="mixed_bfloat16", targets=((s,), "int32"), optimizer=None,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    out = {"by_depth": count_by_depth(build, inputs, 1, L, (1, 2), **options)}
    full = count_abstract(lambda: build(L), inputs, 1, **options)
    rows = full["activations"].pop("residuals")
    out["blocks_kept"] = sum(
        r["bytes"] for r in rows if r["role"] == "kept" and "transformer_layer_" in r["layer"]
    )
    out["full"] = full
    out["card"] = gpt_card(**CONFIG)
    print("JSON" + json.dumps(out, default=str))
    """
)


@pytest.fixture(scope="module")
def counts(tmp_path_factory):
    config = published_runs.card_config(SMALLEST[0])
    script = f"MID = {MID}\nCONFIG = {config!r}\n" + SCRIPT
    return run_json_script(
        script, tmp_path_factory.mktemp("depth_scaling"), without_tensorflow=True, timeout=900
    )


@pytest.mark.slow
@pytest.mark.parametrize("figure", ["flops", "bytes", "parameters"])
def test_the_step_counted_by_depth_is_the_step_counted_whole(counts, figure):
    found, whole = counts["by_depth"][figure], counts["full"][figure]
    assert found == pytest.approx(whole, rel=0.01), (figure, found, whole)


@pytest.mark.slow
@pytest.mark.parametrize("figure", ["kept_bytes", "saved_bytes"])
def test_the_activations_counted_by_depth_are_those_counted_whole(counts, figure):
    found = counts["by_depth"]["activations"][figure]
    whole = counts["full"]["activations"][figure]
    assert found == pytest.approx(whole, rel=0.01), (figure, found, whole)
    if figure == "kept_bytes":  # the slope is what one block of the whole model keeps
        per_block = counts["by_depth"]["per_block"][figure]
        assert per_block == pytest.approx(counts["blocks_kept"] / MID[0], rel=0.01)


@pytest.mark.slow
def test_the_stored_card_of_the_smallest_published_model_is_current(counts):
    stored = SMALLEST[1]
    for field, value in counts["card"].items():
        assert value == pytest.approx(stored[field], rel=1e-6), (SMALLEST[0], field)


def test_bad_depths_are_refused_before_any_count():
    from gpu_parallel_kit.worker.jax.depth_scaling import count_by_depth

    def never(depth):
        raise AssertionError("built")

    with pytest.raises(GpkError, match="must differ"):
        count_by_depth(never, None, 1, 24, depths=(2, 2))
    with pytest.raises(GpkError, match="two depths"):
        count_by_depth(never, None, 1, 24, depths=(0, 2))
