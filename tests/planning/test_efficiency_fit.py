"""The matmul efficiency fitted on the published runs, one for all and one per software stack:
the stored parameters are the fits', and each run projected by its stack fitted without it
lands near its published throughput."""

from __future__ import annotations

import dataclasses

import pytest

from gpu_parallel_kit.analysis.cost_model.matmul_efficiency import FITTED
from gpu_parallel_kit.analysis.cost_model.parallel_plan_memory import memory
from gpu_parallel_kit.analysis.cost_model.roofline import Efficiency
from gpu_parallel_kit.analysis.cost_model.software_stack import STACKS, newest_stack
from gpu_parallel_kit.planning import efficiency_fit, published_runs
from gpu_parallel_kit.planning.published_runs import RUNS

# Kit ÷ published throughput, each run by the fit without it. The production runs (MT-NLG's,
# BLOOM's) ran slower than NVIDIA's benchmarks of the same shapes (MT-NLG 1.4-1.5 times slower
# than Korthikanti et al.'s 530 B on its very plan: docs/published-runs.md), which no efficiency
# of the matmuls' shapes can follow: they are held to their own range.
LEFT_OUT = (0.81, 1.11)
LEFT_OUT_PRODUCTION = (1.08, 1.28)
PRODUCTION = ("MT-NLG", "BLOOM")


# Each run by its own stack fitted without it (docs/published-runs.md, "By software stack").
BY_STACK = (0.85, 1.15)
ALONE = (1.0, 1.28)
# The runs that miss the target, each named and held within MISSED, so that a change to them is
# seen (docs/published-runs.md, "The Llama rows"): NeMo's performance summary's Llama 3 8B (a
# table whose revisions gave one of its rows as 726, 745 and 716 tokens/s/GPU), and dgxc's
# Llama 3.1 405B FP8 on 576 H100s under NeMo 24.12 (×0.849). GPT-3 175B FP8 on 512 H100s
# under NeMo 24.07, a third until the experts' matmuls had their own shapes, is at ×0.851.
MISSES = {
    "Llama 3 8B FP8, 8 H100, nemo-24.07",
    "Llama 3.1 405B FP8, 576 H100, nemo-24.12",
}
MISSED = (0.80, 1.25)
# Megatron-Bridge 26.06 holds two runs, a dense Llama 3.1 405B and Qwen3-30B-A3B (3 B active),
# each projected by the other alone: the mixture reaches less of the peak than even its
# experts' small matmuls give, so the 405B is projected ×0.81 (docs/published-runs.md,
# "Megatron-Bridge's rows in the fit").
BRIDGE_MISSES = {"Llama 3.1 405B FP8, 1024 H100, Megatron-Bridge 26.06": (0.78, 0.84)}


@pytest.fixture(scope="module")
def left_out():
    return efficiency_fit.leave_one_out()


@pytest.fixture(scope="module")
def left_out_by_stack():
    return efficiency_fit.leave_one_out_by_stack()


def test_the_stored_stacks_are_the_fits():
    found = efficiency_fit.stacks()
    assert set(found) == set(STACKS)
    held = efficiency_fit.all_runs()
    for name, stack in found.items():
        for precision in ("bf16", "fp8"):
            got, kept = (s.matmul_at(precision) if s.fitted(precision) else None
                         for s in (stack, STACKS[name]))  # fmt: skip
            assert (got is None) == (kept is None), (name, precision)
            if got is not None:
                assert (got.peak_share, got.edge, got.low, got.high) == pytest.approx(
                    (kept.peak_share, kept.edge, kept.low, kept.high), rel=2e-3
                ), f"re-fit {name} {precision}: {got!r}; store it in software_stack.STACKS"
        assert stack.runs == STACKS[name].runs == sum(r.stack == name for r in held)
        assert stack.shapes == STACKS[name].shapes >= 1, name


def test_each_run_projected_by_its_stack_without_itself_is_within_the_target(left_out_by_stack):
    held = efficiency_fit.all_runs()
    groups = [(r.stack, r.precision) for r in held]
    own = [row for row, group in zip(left_out_by_stack, groups, strict=True)
           if groups.count(group) > 1]  # fmt: skip
    low, high = BY_STACK
    outside = {row.name for row in own if not low <= row.ratio <= high}
    assert outside == MISSES | set(BRIDGE_MISSES) and len(own) == len(held) - 1
    assert all(MISSED[0] <= row.ratio <= MISSED[1] for row in own if row.name in MISSES)
    assert all(row.stack == run.stack for row, run in zip(left_out_by_stack, held, strict=True)
               if row in own)  # fmt: skip
    # A run alone in its stack (BLOOM's, a production run) is projected by the newest other
    # stack, a benchmark's: slower than it, within the production runs' range.
    low, high = ALONE
    others = [row for row in left_out_by_stack if row not in own]
    assert [row.stack for row in others] == [newest_stack().name]
    assert all(low <= row.ratio <= high for row in others), others


def test_megatron_bridges_rows_are_each_projected_by_their_own_stack(left_out_by_stack):
    runs = efficiency_fit.all_runs()
    bridge = [(row, run) for row, run in zip(left_out_by_stack, runs, strict=True)
              if run.stack.startswith("megatron-bridge-")]  # fmt: skip
    # 26 rows: 5 of gpt-oss-120b and 3 of Qwen3-30B-A3B on PP 2 held out (BRIDGE_HELD_OUT)
    assert len(bridge) == 18 and len(published_runs.bridge_runs(held_out=True)) == 8
    assert {run.stack for _, run in bridge} == {
        "megatron-bridge-25.11", "megatron-bridge-26.02", "megatron-bridge-26.04",
        "megatron-bridge-26.06",
    }  # fmt: skip
    assert {run.card_from for _, run in bridge} >= {"qwen3-30b-a3b", "qwen3-235b-a22b"}
    low, high = BY_STACK
    for row, run in bridge:
        assert row.stack == run.stack, row.name
        if row.name in BRIDGE_MISSES:
            low_missed, high_missed = BRIDGE_MISSES[row.name]
            assert low_missed <= row.ratio <= high_missed, row
        else:
            assert low <= row.ratio <= high, row
    # Each plan fits its H100s' 80 GB by the kit's count
    for _, run in bridge:
        used = memory(published_runs.card(run), published_runs.plan(run)).total
        assert used <= 80e9 * 0.95, (run.name, used / 1e9)


def test_maxtexts_fsdp_rows_are_each_projected_by_their_containers_stack(left_out_by_stack):
    runs = efficiency_fit.all_runs()
    maxtext = [(row, run) for row, run in zip(left_out_by_stack, runs, strict=True)
               if run in published_runs.maxtext_runs()]  # fmt: skip
    assert len(maxtext) == 22
    assert {run.stack for _, run in maxtext} == {"maxtext-2024.12", "maxtext-25.01"}
    low, high = BY_STACK
    for row, run in maxtext:
        assert row.stack == run.stack and low <= row.ratio <= high, row
        plan = published_runs.plan(run)
        assert plan.sharding == "fsdp" and plan.tensor == plan.stages == 1
        # Whole blocks recomputed: the one recomputation by which the plan fits 80 GB.
        assert memory(published_runs.card(run), plan).total <= 80e9 * 0.95, run.name
        kept = dataclasses.replace(run, recompute="none")
        assert memory(published_runs.card(kept), published_runs.plan(kept)).total > 80e9


def test_a_stack_fitted_on_one_matmul_shape_is_not_the_default():
    """MaxText's containers are the newest stacks with bf16 runs, each of one model at one
    micro-batch: the default is the newest fitted on several shapes."""
    one_shape = [s for s in STACKS.values() if s.shapes == 1 and s.matmul is not None]
    assert {"maxtext-2024.12", "maxtext-25.01"} <= {s.name for s in one_shape}
    default = newest_stack()
    assert default.shapes > 1 and default.name == "nemo-24.12"
    assert max(s.released for s in one_shape) > default.released


def test_maxtexts_containers_name_their_stacks():
    assert (
        published_runs.stack_name(
            "MaxText on JAX, container nvcr.io/nvidia/jax:maxtext-2024-12-09 (FW_VERSION "
            "2024.12.09); DGX Cloud Benchmarking v24.11.1"
        )
        == "maxtext-2024.12"
    )
    assert (
        published_runs.stack_name(
            "MaxText on JAX, container nvcr.io/nvidia/jax:25.01-maxtext-py3; DGX Cloud "
            "Benchmarking v25.02.01"
        )
        == "maxtext-25.01"
    )


def test_the_bridge_rows_held_out_do_not_fit_or_disagree_with_themselves():
    held = published_runs.bridge_runs(held_out=True)
    gpt_oss = [run for run in held if run.card_from == "gpt-oss-120b"]
    assert len(gpt_oss) == 5
    for run in gpt_oss:  # the kit's count of gpt-oss's activations: far beyond 80 GB
        assert memory(published_runs.card(run), published_runs.plan(run)).total > 150e9
    qwen = [run for run in held if run.card_from == "qwen3-30b-a3b"]
    same = sorted(efficiency_fit.published_step_s(r) for r in qwen if r.global_batch == 1024)
    assert len(qwen) == 3 and same[1] / same[0] > 1.7  # one plan, ×1.77 apart (26.02, 26.02.01)


def test_the_h100_runs_in_bf16_and_fp8_are_held_with_the_a100_ones(left_out_by_stack):
    runs = efficiency_fit.all_runs()
    h100 = [(row, run) for row, run in zip(left_out_by_stack, runs, strict=True)
            if run.device == "h100"]  # fmt: skip
    assert {run.precision for _, run in h100} == {"bf16", "fp8"} and len(h100) >= 20
    # An FP8 run reaches less of the FP8 peak than the same plan in bf16 of the bf16 one
    implied = {(run.layers, run.gpus, run.stack, run.precision): row.implied for row, run in h100}
    pairs = [(share, implied[key[:3] + ("bf16",)]) for key, share in implied.items()
             if key[3] == "fp8" and key[:3] + ("bf16",) in implied]  # fmt: skip
    assert len(pairs) >= 10 and all(fp8 < bf16 for fp8, bf16 in pairs)


def test_the_software_not_the_shapes_set_the_530_b_runs_apart(left_out_by_stack):
    # One share of peak for all left the six 530 B runs ×1.47 apart; by stack they agree.
    runs = efficiency_fit.all_runs()
    ratios = [row.ratio for row, run in zip(left_out_by_stack, runs, strict=True)
              if run.layers == 105]  # fmt: skip
    assert len(ratios) == 6 and max(ratios) / min(ratios) < 1.15 / 0.85


def test_the_stored_parameters_are_the_fits():
    found = efficiency_fit.fitted()
    stored = (FITTED.peak_share, FITTED.edge, FITTED.low, FITTED.high)
    assert (found.peak_share, found.edge, found.low, found.high) == pytest.approx(
        stored, rel=2e-3
    ), f"re-fit: {found!r}; store it in matmul_efficiency.FITTED and docs/published-runs.md"


def test_each_run_projected_without_itself_is_within_the_tolerance(left_out):
    low, high = LEFT_OUT
    production = [row for row in left_out if row.name.startswith(PRODUCTION)]
    outside = [(row.name, round(row.ratio, 2)) for row in left_out
               if row not in production and not low <= row.ratio <= high]  # fmt: skip
    assert outside == []
    low, high = LEFT_OUT_PRODUCTION
    outside = [(row.name, round(row.ratio, 2)) for row in production
               if not low <= row.ratio <= high]  # fmt: skip
    assert len(production) == 4 and outside == []


def test_the_ratio_no_longer_falls_with_the_models_size(left_out):
    # the one band gave 0.99 at 1.7 B down to 0.74 at 1 T on Narayanan et al.'s Table 1; now
    # 0.92-1.09, highest in the middle (18-76 B), with no trend from the smallest to the largest
    table_1 = [row.ratio for row in left_out if row.name.startswith("Megatron-LM")]
    assert len(table_1) == 10 and max(table_1) - min(table_1) < 0.18
    assert table_1[-1] / table_1[0] > 0.9


def test_the_implied_share_reproduces_the_published_step():
    run = RUNS[0]
    share = efficiency_fit.implied_share(run)
    step = efficiency_fit.step_s(run, Efficiency(share, share, share))
    assert step == pytest.approx(efficiency_fit.published_step_s(run), rel=1e-6)


def test_no_share_of_peak_brings_the_530_b_runs_of_one_shape_within_the_target():
    # Six runs train the 530 B model on the same plan shapes; any efficiency of the shapes gives
    # them one share. docs/published-runs.md says no such efficiency can hold them all within
    # ×0.85-1.15: this fails when the step's other terms change enough to make that untrue.
    groups = efficiency_fit.same_shapes()
    group = next(g for g in groups if len(g.names) == 6)
    assert {name.split()[0] for name in group.names} == {"Megatron-LM", "Korthikanti", "MT-NLG"}
    assert min(group.ratios) < 1 < max(group.ratios)
    assert group.spread > 1.15 / 0.85
    smaller = [g for g in groups if g is not group]
    assert all(g.spread < 1.15 / 0.85 for g in smaller), [(g.names, g.spread) for g in smaller]
