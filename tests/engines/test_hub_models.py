"""keras-hub backbones, built tiny from a config and fed dicts of token arrays, train under the
kit's strategies with the weights of one device (1e-5): a pipeline cut between their
Transformer blocks on TensorFlow, replicas, and tensor parallelism on JAX. A backbone whose block
cannot be cut out is refused before training, in one sentence that names it.

keras-hub comes with `.[dev]` and `.[hub]`: missing from a dev install, these tests fail and say
so; elsewhere they skip and say so.
"""

from __future__ import annotations

import importlib.util

import pytest

import gpu_parallel_kit as gpk
from tests import extras, hub_models
from tests.builders import largest_difference, saved_weights

KERAS_HUB = importlib.util.find_spec("keras_hub") is not None
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not KERAS_HUB and not extras.installed_but("dev", "keras-hub"),
        reason="keras-hub is not installed: .[dev] or .[hub] brings it (docs/getting-started.md)",
    ),
]


@pytest.fixture(autouse=True)
def keras_hub_installed():
    if not KERAS_HUB:  # and every other package of `.[dev]` is: not a skip
        pytest.fail('keras-hub is missing: python -m pip install -e ".[dev]"', pytrace=False)


# (model, backend, strategy, devices, options): each against the same model on one device of its
# backend. GPT-2 is cut between its blocks on 4 stages, BERT (three inputs, a dict output) and
# Gemma on 2; Mistral's and Mixtral's embeddings keep a reverse embedding their forward never
# reads, and Mixtral's router adds a load-balancing loss of its own; BERT's explicit loop under
# multiworker leaves its pooler, which the head does not use, without a gradient; Gemma's heads
# are split on JAX (laid out (heads, features, head size), one key-value head replicated), and
# the Llama's in the last test, with its own layout too.
CASES = [
    ("gpt2", "tensorflow", "pipeline", 4, {}),
    ("gpt2", "tensorflow", "data", 2, {}),
    ("bert", "tensorflow", "pipeline", 2, {}),
    ("gemma", "tensorflow", "pipeline", 2, {}),
    ("mistral", "tensorflow", "pipeline", 4, {}),
    ("mixtral", "tensorflow", "pipeline", 4, {}),
    ("bert", "tensorflow", "multiworker", 1, {"workers": 2}),
    ("bert", "jax", "data", 2, {}),
    ("gemma", "jax", "tensor", 2, {}),
]
IDS = [f"{name}-{backend}-{strategy}x{devices}" for name, backend, strategy, devices, _ in CASES]


@pytest.fixture(scope="module")
def one_device(tmp_path_factory):
    """Each (model, backend)'s experiment and its weights after training on one device, trained
    once for the cases that compare with it. The cases check weights, saved before anything is
    measured apart from training, so they skip the communication measurement: 2-4 s of each
    TensorFlow data or multiworker run of these backbones."""
    done = {}

    def trained(name: str, backend: str):
        if (name, backend) not in done:
            folder = tmp_path_factory.mktemp(f"{name}-{backend}")
            experiment = gpk.Experiment(
                model=getattr(hub_models, name),
                data=hub_models.tokens(name),
                batch_size=32,
                steps_per_epoch=2,
                backend=backend,
                progress=False,
                log=str(folder / "runs.sqlite"),
                measure_comm=False,
            )
            alone = experiment.run("single", 1, save_weights=str(folder / "single.npz"))
            assert alone.ok, alone.reason
            done[name, backend] = experiment, saved_weights(folder / "single.npz")
        return done[name, backend]

    return trained


@pytest.mark.parametrize(("name", "backend", "strategy", "devices", "options"), CASES, ids=IDS)
def test_a_keras_hub_backbone_trains_like_one_device(
    name, backend, strategy, devices, options, one_device, tmp_path
):
    experiment, reference = one_device(name, backend)
    path = tmp_path / "split.npz"
    split = experiment.run(strategy, devices, save_weights=str(path), **options)
    assert split.ok, split.reason
    assert largest_difference(saved_weights(path), reference) <= 1e-5
    if strategy == "pipeline":  # cut between the backbone's own layers, named inside it
        firsts = list(split.stages["first_layer"])
        assert all(layer.startswith(f"{name}_backbone/") for layer in firsts[:-1]), firsts
        if devices == 4:
            assert f"{name}_backbone/transformer_layer_1" in firsts, firsts
    if strategy == "tensor":  # the block read inside: its query kernel split on its heads
        placed = {p["variable"]: p for p in split.extra["layout"]}
        query = placed["decoder_block_0/attention/query/kernel"]
        assert (query["role"], query["shard_shape"][0]) == ("heads", query["shape"][0] // 2)


def test_a_backbone_whose_block_cannot_be_rebuilt_is_refused_in_one_sentence(tmp_path):
    """keras-hub 0.32's Llama block names an attribute it does not set in its get_config(), so
    its stage cannot be rebuilt on a device: refused before training, the block named."""
    experiment = gpk.Experiment(
        model=hub_models.llama,
        data=hub_models.tokens("llama"),
        batch_size=32,
        steps_per_epoch=2,
        progress=False,
        log=str(tmp_path / "runs.sqlite"),
    )
    refused = experiment.run("pipeline", 4)
    assert refused.status == "failed" and refused.step_time_s is None
    reason = refused.reason
    assert reason.startswith("layer 'llama_backbone/transformer_layer_0' "), reason
    assert reason.endswith("use strategy='data', or backend='jax' with strategy='tensor'"), reason
    assert "\n" not in reason and ". " not in reason, reason
    assert not any(raw in reason for raw in ("in user code", "Traceback", "tensorflow")), reason


def test_llamas_own_layout_shards_as_keras_hub_says_and_trains_like_one_device(tmp_path):
    """The kit's rules split the Llama block inside (heads, gated MLP); layout_map="own" takes
    LlamaBackbone.get_layout_map over the kit's mesh instead; both train one device's weights."""
    experiment = gpk.Experiment(
        model=hub_models.llama,
        data=hub_models.tokens("llama"),
        batch_size=32,
        steps_per_epoch=2,
        backend="jax",
        progress=False,
        log=str(tmp_path / "runs.sqlite"),
    )
    paths = {which: tmp_path / f"{which}.npz" for which in ("single", "kit", "own")}
    alone = experiment.run("single", 1, save_weights=str(paths["single"]))
    kit = experiment.run("tensor", 2, save_weights=str(paths["kit"]))
    own = experiment.run("tensor", 2, layout_map="own", save_weights=str(paths["own"]))
    assert alone.ok and kit.ok and own.ok, (alone.reason, kit.reason, own.reason)
    for which in ("kit", "own"):
        trained = saved_weights(paths[which])
        assert largest_difference(trained, saved_weights(paths["single"])) <= 1e-5, which
    query = "transformer_layer_0/self_attention/query/kernel"
    placed = {p["variable"]: p for p in own.extra["layout"]}
    assert (placed[query]["role"], placed[query]["axes"]) == ("own", ["model", "batch", ""])
    assert placed[query]["shard_shape"][0] == placed[query]["shape"][0] // 2  # as JAX placed it
    assert placed["transformer_layer_0/self_attention_layernorm/scale"]["role"] == "replicated"
    ours = {p["variable"]: p for p in kit.extra["layout"]}  # the block read inside: heads split
    assert (ours[query]["role"], ours[query]["axes"]) == ("heads", ["", "model", ""])
    gate = ours["transformer_layer_0/feedforward_gate_dense/kernel"]
    assert (gate["role"], gate["shard_shape"]) == ("column", [32, 32])


def test_the_own_layouts_gathers_over_the_data_axis_are_in_comm_bytes(tmp_path):
    """keras-hub's own layout puts its `batch` axis on weights: on a 2x2 mesh each such weight
    is gathered twice and reduce-scattered, and the row's comm_bytes counts them."""
    experiment = gpk.Experiment(
        model=hub_models.llama,
        data=hub_models.tokens("llama"),
        batch_size=32,
        steps_per_epoch=2,
        backend="jax",
        progress=False,
        log=str(tmp_path / "runs.sqlite"),
    )
    own = experiment.run("tensor", 4, mesh=(2, 2), layout_map="own", measure_comm=False)
    assert own.ok, own.reason
    gathered = own.extra["all_gather_bytes"]
    query = "transformer_layer_0/self_attention/query/kernel"
    placed = {p["variable"]: p for p in own.extra["layout"]}
    assert "batch" in placed[query]["axes"]
    assert gathered > 0 and own.extra["reduce_scatter_bytes"] == gathered // 2
    assert own.comm_bytes >= gathered + own.extra["reduce_scatter_bytes"]
