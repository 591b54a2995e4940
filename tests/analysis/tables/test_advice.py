"""The advice sentence and the communication figure, from literal rows."""

from __future__ import annotations

import dataclasses

import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.runs.results.run_result import RunResult


def _row(strategy, devices, throughput, virtual=True, status="ok", comm=None, **extra):
    step = 256 / throughput if throughput else None
    return RunResult(
        run_id=f"{strategy}{devices}{status}",
        experiment_id="e",
        strategy=strategy,
        devices=devices,
        virtual=virtual and devices > 1,
        status=status,
        global_batch=256,
        step_time_s=step,
        throughput_samples_s=throughput,
        comm_time_s=comm,
        comm_share=None if comm is None or step is None else comm / step,
        extra=extra,
    )


def test_virtual_devices_that_do_not_help_are_named_as_the_reason():
    cmp = gpk.Comparison([_row("single", 1, 1000.0), _row("data", 2, 800.0, comm=0.0)])
    assert cmp.advice == (
        "Pick single on 1 device(s) (1,000 samples/s, speedup 1.00): data on 2 devices was "
        "slower (800 samples/s, speedup 0.80) because its virtual devices share the same cores, "
        "so extra devices add coordination but no compute."
    )


def test_communication_bound_on_real_devices():
    slow = _row("data", 4, 900.0, virtual=False, comm=0.15)
    cmp = gpk.Comparison([_row("single", 1, 1000.0, virtual=False), slow])
    assert "communication-bound at 53% of its step" in cmp.advice


def test_scaling_well_is_compute_bound():
    cmp = gpk.Comparison(
        [
            _row("single", 1, 1000.0, virtual=False),
            _row("data", 4, 3600.0, virtual=False, comm=0.001),
        ]
    )
    assert cmp.advice.startswith("Pick data on 4 device(s) (3,600 samples/s, speedup 3.60)")
    assert "compute-bound" in cmp.advice


def test_memory_bound_points_to_model_parallel():
    refused = dataclasses.replace(_row("single", 1, None, status="oom"), reason="over budget")
    cmp = gpk.Comparison([refused, _row("model", 4, 500.0)])
    assert "memory-bound" in cmp.advice and cmp.advice.startswith("Pick model on 4")


def test_advice_is_shown_under_the_table():
    cmp = gpk.Comparison([_row("single", 1, 1000.0), _row("data", 2, 800.0, comm=0.0)])
    assert repr(cmp).endswith(cmp.advice)
    assert cmp.advice in cmp._repr_html_()


def test_communication_figure_has_both_panels_and_says_how_it_was_measured():
    cmp = gpk.Comparison([_row("single", 1, 1000.0), _row("data", 2, 800.0, comm=0.01)])
    figure = cmp.plot_communication()
    assert len(figure.axes) == 2
    caption = figure.get_supxlabel()
    assert "with minus without the all-reduce" in caption and "shared cores" in caption


def test_with_a_target_the_pick_is_the_run_that_reached_it_first():
    from tests.analysis.tables.test_time_to_accuracy import _comparison

    cmp = gpk.Comparison(_comparison())
    assert cmp.advice == (
        "Pick data on 2 device(s) (4 s to val_accuracy >= 0.9, epoch 4): data on 4 devices "
        "processes 1.84× the samples/s but never reached it."
    )
    nobody = [dataclasses.replace(r, target={**r.target, "value": 0.99}) for r in _comparison()]
    assert gpk.Comparison(nobody).advice.startswith("No run reached val_accuracy >= 0.99")


def _spread(result: RunResult, relative: float) -> RunResult:
    return dataclasses.replace(result, step_time_spread_s=result.step_time_s * relative)


def test_data_on_one_device_is_never_picked_over_single():
    # data×1 measured 32% faster than single: the same training with extra bookkeeping, so noise.
    cmp = gpk.Comparison(
        [_row("single", 1, 1000.0), _row("data", 1, 1320.0), _row("data", 2, 800.0)]
    )
    assert cmp.advice.startswith("Pick single on 1 device(s)")
    assert "data on 1" not in cmp.advice


def test_a_gain_within_the_runs_spread_is_the_same_within_noise():
    # Interquartile ranges of ±5% around each median overlap: 8% apart is within noise.
    single = _spread(_row("single", 1, 1000.0, virtual=False), 0.1)
    data = _spread(_row("data", 2, 1080.0, virtual=False), 0.1)
    advice = gpk.Comparison([single, data]).advice
    assert advice.startswith("Pick single on 1 device(s)")
    assert "the same within noise" in advice and "±10%" in advice


def test_a_gain_beyond_the_spread_is_a_gain():
    single = _spread(_row("single", 1, 1000.0, virtual=False), 0.01)
    data = _spread(_row("data", 2, 1800.0, virtual=False), 0.01)
    advice = gpk.Comparison([single, data]).advice
    assert advice.startswith("Pick data on 2 device(s)") and "noise" not in advice


def test_a_slowdown_within_noise_is_not_called_slower():
    single = _spread(_row("single", 1, 1000.0), 0.1)
    data = _spread(_row("data", 2, 960.0), 0.1)
    advice = gpk.Comparison([single, data]).advice
    assert "same within noise" in advice and "slower" not in advice


def _rounds_of(result: RunResult, per_round_steps) -> RunResult:
    """`result` as a comparison's merged rounds with these per-round step times."""
    return dataclasses.replace(
        result, extra={**result.extra, "rounds": 3, "round_step_times_s": per_round_steps}
    )


def test_the_advice_quotes_the_interval_it_judges_by():
    base = [[0.256, 0.257], [0.300, 0.301], [0.270, 0.271]]
    same = [[0.250, 0.251], [0.310, 0.311], [0.262, 0.263]]  # faster in two rounds, slower in one
    single = _rounds_of(_row("single", 1, 1000.0), base)
    data = _rounds_of(_row("data", 2, 1030.0), same)
    cmp = gpk.Comparison([single, data])
    low, high = cmp.table.loc[1, ["speedup_ci_low", "speedup_ci_high"]]
    assert low <= 1.0 <= high
    assert cmp.advice.startswith("Pick single on 1 device(s)")
    assert f"95% interval, {low:.2f}–{high:.2f}, holds 1" in cmp.advice


def test_runs_that_differ_in_scaling_and_learning_rate_are_named_apart():
    strong = dataclasses.replace(_row("data", 2, 1500.0), scaling="strong", run_id="s")
    weak = dataclasses.replace(_row("data", 2, 1800.0), scaling="weak", lr_factor=2.0, run_id="w")
    cmp = gpk.Comparison([_row("single", 1, 1000.0), strong, weak])
    assert cmp.advice.startswith("Pick data on 2 device(s) (weak, lr×2)")


def test_a_one_device_run_above_the_baseline_is_named_under_the_pick():
    cmp = gpk.Comparison([_row("single", 1, 1000.0), _row("data", 1, 1300.0)])
    assert cmp.advice.startswith("Pick single on 1 device(s)")
    assert "Data on 1 device measured 1,300 samples/s, speedup 1.30" in cmp.advice
    assert "the same training on the same device" in cmp.advice


def test_a_speedup_beyond_the_ideal_is_never_quoted_without_a_word():
    cmp = gpk.Comparison([_row("single", 1, 1000.0), _row("data", 2, 2600.0, comm=0.001)])
    assert bool(cmp.table.loc[1, "above_ideal"])
    assert "beyond the ideal 2" in cmp.advice


def test_a_one_device_tie_with_single_names_single():
    # As measured: data×1 ties single, data×2 and ×4 are slower within the runs' spread.
    rows = [
        _spread(_row("single", 1, 175_700.0), 0.2),
        _spread(_row("data", 1, 175_706.0), 0.2),
        _spread(_row("data", 2, 170_000.0), 0.2),
        _spread(_row("data", 4, 120_000.0), 0.02),
    ]
    advice = gpk.Comparison(rows).advice
    assert advice.startswith("Pick single on 1 device(s) (175,700 samples/s, speedup 1.00)")
    assert "data on 2 devices measured the same within noise" in advice
    assert "Pick data" not in advice


def test_without_a_single_run_the_one_device_pick_is_still_single():
    rows = [
        _spread(_row("data", 1, 175_706.0), 0.2),
        _spread(_row("data", 2, 170_000.0), 0.2),
        _spread(_row("data", 4, 120_000.0), 0.02),
    ]
    advice = gpk.Comparison(rows).advice
    assert advice.startswith(
        "Pick single on 1 device(s), the same training as data on 1 device "
        "(175,706 samples/s) without its bookkeeping: data on 2 devices measured the same "
        "within noise"
    )
    assert "Pick data" not in advice


def test_without_a_single_run_a_gain_within_noise_of_one_device_is_none():
    rows = [_spread(_row("data", 1, 1000.0), 0.1), _spread(_row("data", 2, 1050.0), 0.1)]
    advice = gpk.Comparison(rows).advice
    assert advice.startswith("Pick single on 1 device(s), the same training as data on 1 device")
    assert "data on 2 devices measured 1,050 samples/s, the same within noise" in advice


def test_without_a_single_run_a_real_gain_is_still_picked():
    rows = [_spread(_row("data", 1, 1000.0), 0.01), _spread(_row("data", 2, 1900.0), 0.01)]
    assert gpk.Comparison(rows).advice.startswith("Pick data on 2 device(s) (1,900 samples/s")


def _deepest_bracket(text: str) -> int:
    depth = deepest = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        deepest = max(deepest, depth)
    return deepest


def test_the_advice_covers_every_run_in_plain_sentences():
    rows = [_row("single", 1, 1000.0, virtual=False), _row("data", 2, 1800.0, virtual=False),
            _row("data", 4, 3000.0, virtual=False, comm=0.02),
            _row("pipeline", 2, 600.0, virtual=False, comm=0.3)]  # fmt: skip
    said = gpk.Comparison(rows).advice
    for name in ("data on 4 device", "data on 2 devices", "pipeline on 2 devices"):
        assert name in said, said
    assert _deepest_bracket(said) <= 1, said


def test_the_advice_names_the_communication_share_the_table_shows():
    """A row that merged rounds shows the share of the round it shows; the advice says the same
    figure, not that round's communication over the rounds' median step."""
    from gpu_parallel_kit.analysis.tables.compact_view import compact_frame
    from gpu_parallel_kit.runs.scheduling.comparison_rounds import merge_rounds, tag_round

    def rounds(strategy, devices, steps, comm):
        rows = []
        for i, step in enumerate(steps):
            row = dataclasses.replace(
                _row(strategy, devices, 256 / step, virtual=False, comm=comm),
                run_id=f"{strategy}{i}",
                step_times_s=(step, step),
            )
            rows.append(tag_round(row, (i, len(steps), f"{strategy}0")))
        return merge_rounds(rows)

    single = rounds("single", 1, [0.0003, 0.0003], None)
    multi = rounds("multiworker", 2, [0.013, 0.0216], 0.0095)
    cmp = gpk.Comparison([single, multi])
    shown = cmp.table.iloc[1]
    assert shown["comm_share"] != pytest.approx(0.0095 / shown["step_time_s"])  # rounds differ
    share = compact_frame(cmp.table).iloc[1]["comm share"]
    assert f"communication-bound at {share} of its step" in cmp.advice


def test_a_run_without_a_single_device_beside_it_names_no_efficiency():
    cmp = gpk.Comparison([_row("tensor", 4, 900.0, virtual=False)])
    assert "nan" not in cmp.advice
    assert "with no single-device run beside it, how well it scales is not known" in cmp.advice
