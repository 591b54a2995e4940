"""The matmul efficiency fitted on the published runs: the stored parameters are the fit's, and
each run projected by a fit made without it lands near its published throughput."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.analysis.cost_model.matmul_efficiency import FITTED
from gpu_parallel_kit.analysis.cost_model.roofline import Efficiency
from gpu_parallel_kit.planning import efficiency_fit
from gpu_parallel_kit.planning.published_runs import RUNS

# Kit ÷ published throughput, each run by the fit without it. The production runs (MT-NLG's,
# BLOOM's) ran slower than NVIDIA's benchmarks of the same shapes (MT-NLG 1.4-1.5 times slower
# than Korthikanti et al.'s 530 B on its very plan: docs/published-runs.md), which no efficiency
# of the matmuls' shapes can follow: they are held to their own range.
LEFT_OUT = (0.81, 1.11)
LEFT_OUT_PRODUCTION = (1.08, 1.28)
PRODUCTION = ("MT-NLG", "BLOOM")


@pytest.fixture(scope="module")
def left_out():
    return efficiency_fit.leave_one_out()


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
