"""The kept cards of the published H100 runs' models (`planning/published_h100_cards.json`,
counted by `benchmarks/count_h100_cards.py`) against their published parameter counts, their
configs and the runs they serve. The kept-card checks read a JSON file; the one recount, which
builds keras-hub in a fresh JAX process, is marked slow."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from gpu_parallel_kit.analysis.cost_model.model_card import ModelCard
from gpu_parallel_kit.planning.published_h100_cards import (
    BY_KEY,
    H100_RUNS,
    HUB_MODELS,
    TOLERANCE,
    UNCOUNTED,
    load_cards,
    run_sequences,
)
from tests.jax.json_child import run_json_script

KEPT = load_cards()
CARDS, COUNTED = KEPT["cards"], KEPT["counted"]
RUN_MODELS = json.loads(H100_RUNS.read_text())["models"]
DENSE = [m for m in HUB_MODELS if m.active is None]
MOE = [m for m in HUB_MODELS if m.active is not None]


def ids(model) -> str:
    return model.key


def run_key(key: str) -> str:
    """The runs' model key a card serves: a variant's base ("llama3.1-405b-kv16")."""
    return key if key in RUN_MODELS else key.rsplit("-", 1)[0]


def test_every_model_is_counted_or_said_why_not():
    assert set(CARDS) == set(COUNTED) == set(BY_KEY)
    assert set(KEPT["uncounted"]) == set(UNCOUNTED) == set()  # Nemotron-4 340B is counted now
    assert not set(UNCOUNTED) & set(CARDS)


def test_nemotrons_stand_in_card_holds_nemotrons_own_weights():
    # Nemotron-4 340B as NeMo builds it (Nemotron4Config340B): width 18,432, 8 KV groups of
    # head width 192, a squared-ReLU MLP of 73,728 in two matrices; counted here by hand, not
    # from the gated stand-in keras-hub built.
    h, kv, mlp = 18432, 8 * 192, 73728
    block = 2 * h * h + 2 * h * kv + 2 * h * mlp  # Q, O; K, V; the MLP's two matrices
    card = CARDS["nemotron4-340b"]
    assert card["block_parameters"] == block + 2 * h  # and the stand-in's two RMS norms
    # The technical report's 331.6 B weights outside the embeddings, and 9.4 B in them.
    assert 96 * block / 331.6e9 == pytest.approx(1, abs=1e-3)
    assert card["parameters"] - 96 * card["block_parameters"] - h == pytest.approx(9.4e9, rel=5e-3)


@pytest.mark.parametrize("model", HUB_MODELS, ids=ids)
def test_each_card_serves_runs_of_its_model_at_its_sequence(model):
    assert run_key(model.key) in RUN_MODELS
    assert model.sequence in run_sequences()[run_key(model.key)]
    assert CARDS[model.key]["sequence"] == model.sequence
    assert COUNTED[model.key]["config"] == model.config  # the kept card is of today's config
    assert COUNTED[model.key]["seconds"] > 0


@pytest.mark.parametrize("model", HUB_MODELS, ids=ids)
def test_each_cards_parameters_hold_the_published_count(model):
    assert CARDS[model.key]["parameters"] / model.total == pytest.approx(1, abs=TOLERANCE)


@pytest.mark.parametrize("model", MOE, ids=ids)
def test_each_mixtures_active_parameters_hold_the_published_count(model):
    card = CARDS[model.key]
    assert (card["experts"], card["top_k"]) == (
        model.config["num_experts"],
        model.config["top_k"],
    )
    assert model.counted_active(card) / model.active == pytest.approx(1, abs=TOLERANCE)
    assert 0 < card["expert_parameters"] < card["parameters"]


@pytest.mark.parametrize("model", DENSE, ids=ids)
def test_a_dense_card_has_no_experts_and_all_its_parameters_active(model):
    card = CARDS[model.key]
    assert not card["experts"]
    assert ModelCard(**card).active_parameters == card["parameters"]


@pytest.mark.parametrize("model", HUB_MODELS, ids=ids)
def test_each_cards_shape_is_its_configs_and_its_runs_models(model):
    card, config = CARDS[model.key], model.config
    said = (card["layers"], card["hidden"], card["heads"], card["kv_heads"], card["vocabulary"])
    assert said == (
        config["num_layers"],
        config["hidden_dim"],
        config["num_query_heads"],
        config["num_key_value_heads"],
        config["vocabulary_size"],
    )
    runs = RUN_MODELS[run_key(model.key)]
    assert said[:3] == (runs["layers"], runs["hidden"], runs["heads"])
    assert card["vocabulary"] == runs["vocabulary"]
    if model.key == run_key(model.key):
        assert card["kv_heads"] == runs["kv_heads"]


@pytest.mark.parametrize("model", DENSE, ids=ids)
def test_a_llama_cards_parameters_are_its_weights_counted_by_hand(model):
    c = model.config
    h, f, v, n = c["hidden_dim"], c["intermediate_dim"], c["vocabulary_size"], c["num_layers"]
    kv = c["num_key_value_heads"] * h // c["num_query_heads"]  # K and V widths
    block = 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h  # Q, O; K, V; gated MLP; two RMS norms
    assert CARDS[model.key]["parameters"] == n * block + 2 * v * h + h  # untied head, final norm
    assert CARDS[model.key]["block_parameters"] == block


def test_the_dgxc_405b_shape_adds_eight_kv_groups_to_every_block():
    eight, sixteen = CARDS["llama3.1-405b"], CARDS["llama3.1-405b-kv16"]
    assert (eight["kv_heads"], sixteen["kv_heads"]) == (8, 16)
    extra = 126 * 2 * 16384 * 8 * 128  # K and V of 8 more groups of 128, each block
    assert sixteen["parameters"] - eight["parameters"] == extra


@pytest.mark.parametrize("model", HUB_MODELS, ids=ids)
def test_each_cards_flops_are_six_a_weight_and_the_attention(model):
    # 6 FLOPs a token for each active weight but the input embedding (a lookup), and
    # 12 · s · (heads × head width) a block for QKᵀ and the weighted values, forward and back;
    # what a count holds beyond them (the mixtures' routing and banks' elementwise work) is a
    # few per cent at most.
    card, config = CARDS[model.key], model.config
    width = config.get("head_dim") or config["hidden_dim"] // config["num_query_heads"]
    attention = 12 * card["layers"] * model.sequence * config["num_query_heads"] * width
    weights = ModelCard(**card).active_parameters - card["vocabulary"] * card["hidden"]
    per_token = card["flops_per_sample"] / model.sequence
    assert 0.99 < per_token / (6 * weights + attention) < (1.01 if model in DENSE else 1.10)


@pytest.mark.slow
def test_a_recount_gives_the_kept_card(tmp_path):
    script = textwrap.dedent(
        """
        import json
        from dataclasses import asdict
        from gpu_parallel_kit.analysis.cost_model.model_card import model_card
        from gpu_parallel_kit.planning.published_h100_cards import BY_KEY
        from gpu_parallel_kit.worker.jax.hub_cards import hub_count

        model = BY_KEY["llama3-8b"]
        count = hub_count(model.backbone, model.config, model.sequence)
        card = model_card(count, "bf16", "adam", model.name, sequence=model.sequence)
        print("JSON" + json.dumps(asdict(card)))
        """
    )
    fresh = run_json_script(script, tmp_path, timeout=600, without_tensorflow=True)
    kept = CARDS["llama3-8b"]
    assert fresh["parameters"] == kept["parameters"]
    assert fresh["flops_per_sample"] == pytest.approx(kept["flops_per_sample"], rel=1e-6)
    assert fresh["activation_bytes"] == pytest.approx(kept["activation_bytes"], rel=1e-6)


def test_the_docs_table_shows_each_kept_card():
    page = (Path(__file__).parents[2] / "docs" / "published-runs.md").read_text()
    rows = {line for line in page.splitlines() if "count_h100_cards.py --only" in line}
    for key, card in CARDS.items():
        row = next(r for r in rows if f"--only {key} --store`" in r)
        assert f"{card['parameters'] / 1e9:.2f} B / " in row
        if BY_KEY[key].active is not None:
            assert f"{BY_KEY[key].counted_active(card) / 1e9:.2f} B / " in row
        assert f"| {BY_KEY[key].sequence:,} |" in row
