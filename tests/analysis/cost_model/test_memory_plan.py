"""The memory planner against the ZeRO paper's own worked figures (Rajbhandari et al., SC 2020,
figure 1: Ψ = 7.5B, Adam in mixed precision, K = 12, N_d = 64) and on hand counts."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.analysis.cost_model.memory_plan import plan_memory, state_bytes
from gpu_parallel_kit.errors import GpkError


def _totals(table, devices):
    rows = table[table["devices"] == devices]
    return dict(zip(rows["strategy"], rows["total_bytes"] / 1e9, strict=True))


def test_the_papers_figure_one():
    totals = _totals(plan_memory(params=7.5e9, optimizer="adam", precision="mixed", devices=64), 64)
    assert round(totals["data"], 1) == 120.0
    assert round(totals["zero-1"], 1) == 31.4
    assert round(totals["zero-2"], 1) == 16.6
    assert round(totals["fsdp"], 1) == 1.9


@pytest.mark.parametrize(
    "devices, published",
    [(4, (52.5, 41.3, 30.0)), (16, (35.6, 21.6, 7.5)), (256, (30.4, 15.4, 0.47))],
)
def test_the_papers_table_one_for_seven_and_a_half_billion_parameters(devices, published):
    """Table 1 of the paper, 7.5B parameters: P_os, P_os+g and P_os+g+p in GB per device,
    to the digits it prints."""
    totals = _totals(plan_memory(params=7.5e9, devices=devices), devices)
    digits = [1, 1, 2 if published[2] < 1 else 1]
    computed = [totals[name] for name in ("zero-1", "zero-2", "fsdp")]
    # half up, as printed: 41.25 reads 41.3
    assert [round(c + 1e-9, d) for c, d in zip(computed, digits, strict=True)] == list(published)


def test_k_is_twelve_for_mixed_precision_adam_and_eight_in_fp32():
    assert state_bytes("adam", "mixed").optimizer == 12
    fp32 = state_bytes("adam", "fp32")
    assert (fp32.params, fp32.grads, fp32.optimizer) == (4, 4, 8)
    assert state_bytes("sgd", "fp32").optimizer == 0 and state_bytes(6, "mixed").optimizer == 6


def test_components_split_as_each_stage_shards_them():
    table = plan_memory(params=1e9, devices=[8], stages=4, model_axis=2)
    row = table.set_index("strategy")
    assert (
        row.loc["zero-1", "params_bytes"] == 2e9
        and row.loc["zero-1", "optimizer_bytes"] == 12e9 / 8
    )
    assert row.loc["zero-2", "grads_bytes"] == 2e9 / 8
    assert row.loc["fsdp", "params_bytes"] == 2e9 / 8
    assert (
        row.loc["pipeline", "params_bytes"] == 2e9 / 4 and row.loc["tensor", "params_bytes"] == 1e9
    )
    assert list(row[row["modelled_only"]].index) == ["zero-1", "zero-2"]
    assert "modelled only" in row.loc["zero-2", "note"]


def test_activations_follow_the_batch_and_the_split():
    table = plan_memory(
        params=1e6, batch=8, activations=[(16, 32), (16, 32)], devices=[4], precision="fp32"
    )
    row = table.set_index("strategy")
    whole = 2 * 16 * 32 * 4 * 8  # elements per sample × 4 bytes × batch
    assert row.loc["data", "activations_bytes"] == whole / 4
    assert row.loc["pipeline", "activations_bytes"] == whole / 4


def test_a_named_device_says_what_fits():
    table = plan_memory(params=7e9, devices=[8, 64], device="h100")
    fits = table.set_index(["strategy", "devices"])["fits"]
    assert not fits[("data", 8)] and fits[("fsdp", 8)] and fits[("fsdp", 64)]
    assert table.attrs["device"] == "h100" and "ZeRO" in table.attrs["source"]


def test_a_built_model_or_builder_gives_the_count():
    class Built:
        def count_params(self):
            return 1000

    assert plan_memory(model=Built, devices=1)["params_bytes"].iloc[0] == 2000


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(), "neither params= nor model= was given; give one of them: params= a count"),
        (
            dict(params=1e9, model="m"),
            "params=1000000000.0 and model='m' were both given; give only one",
        ),
        (dict(params=-1), "params=-1 must be a positive count"),
        (dict(params=1e9, optimizer="adamax"), "optimizer='adamax' is not known"),
        (dict(params=1e9, precision="int8"), "precision='int8' is not known"),
        (dict(params=1e9, devices=[0]), "devices=0 must be whole counts"),
        (dict(params=1e9, activations=[(0, 3)]), "activation shape (0, 3)"),
    ],
)
def test_bad_input_is_one_sentence(kwargs, message):
    with pytest.raises(GpkError, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan_memory(**kwargs)


def test_bf16_and_fp16_are_mixed_precision_and_float32_is_fp32():
    def totals(precision=None):
        asked = {} if precision is None else {"precision": precision}
        return list(plan_memory(params=1e9, devices=8, **asked)["total_bytes"])

    assert totals("bf16") == totals("fp16") == totals("BF16") == totals()
    assert totals("float32") == totals("fp32") != totals()
