"""The comparison table: column contract, speedup rules, and the two text renderings."""

from __future__ import annotations

import dataclasses
import math

import pytest

from gpu_parallel_kit.analysis.tables.comparison_table import (
    ALL_COLUMNS,
    COLUMNS,
    comparison_table,
    format_table,
    markdown_table,
)
from gpu_parallel_kit.runs.results.run_result import RunResult


def run(run_id: str, strategy: str, devices: int, throughput: float | None, **kw) -> RunResult:
    fields = {"experiment_id": "exp", "virtual": True, "status": "ok", "global_batch": 64}
    fields.update(kw)
    step = 64 / throughput if throughput else None
    return RunResult(
        run_id=run_id,
        strategy=strategy,
        devices=devices,
        throughput_samples_s=throughput,
        step_time_s=step,
        **fields,
    )


def by_id(df):
    return df.set_index("run_id")


def test_columns_come_in_contract_order_then_extras():
    df = comparison_table([run("a", "single", 1, 100.0)])
    assert list(df.columns[: len(COLUMNS)]) == [
        "run_id", "strategy", "devices", "virtual", "schedule", "micro_batches", "global_batch",
        "status", "reason", "wall_time_s", "step_time_s", "step_time_spread_s",
        "throughput_samples_s", "speedup", "efficiency", "peak_memory_bytes", "comm_time_s",
        "comm_share", "comm_bytes", "projected",
    ]  # fmt: skip
    assert list(df.columns[len(COLUMNS) :]) == [
        "backend", "mesh", "data", "tensor", "stages", "workers", "nodes", "devices_per_worker",
        "scaling", "mode", "all_reduce",
        "device_kind", "epochs", "steps_per_epoch", "timed_steps", "startup_s",
        "training_time_s", "tune", "steps_per_execution", "steps_per_execution_why", "jit_compile",
        "experiment_id",
        "created_at",
        "bubble_fraction", "bubble_theoretical", "bubble_simulated", "simulated_step_time_s",
        "task_overhead_s", "outside_tasks_s", "micro_batches_auto",
        "state_bytes", "peak_activation_bytes", "params_bytes", "grads_bytes", "optimizer_bytes",
        "activations_bytes", "compute_time_s", "effective_bandwidth_bytes_s",
        "comm_noise_s",
        "comm_below_noise", "comm_measured", "step_time_low_s", "step_time_high_s",
        "experts", "dropped_tokens", "routed_tokens", "expert_flops", "dense_expert_flops",
        "predicted_step_time_s", "predicted_over_measured", "predicted_off_in", "predicted_from",
        "rounds", "measured_until", "measure_needs_s", "step_time_ci_low_s",
        "step_time_ci_high_s", "speedup_ci_low", "speedup_ci_high", "above_ideal",
        "learning_rate", "lr_scaling", "lr_factor", "warmup_epochs", "target", "target_reached",
        "time_to_target_s", "epochs_to_target", "time_to_target_speedup",
    ]  # fmt: skip


def test_speedup_is_throughput_over_single_run_and_efficiency_divides_by_devices():
    df = by_id(
        comparison_table(
            [run("s", "single", 1, 100.0), run("d2", "data", 2, 200.0), run("d4", "data", 4, 300.0)]
        )
    )
    assert df.loc["s", "speedup"] == pytest.approx(1.0)
    assert df.loc["d2", "speedup"] == pytest.approx(2.0)
    assert df.loc["d2", "efficiency"] == pytest.approx(1.0)
    assert df.loc["d4", "speedup"] == pytest.approx(3.0)
    assert df.loc["d4", "efficiency"] == pytest.approx(0.75)


def test_failed_row_keeps_status_and_reason_with_nan_figures():
    oom = run("m4", "model", 4, 900.0, status="oom", reason="out of memory on gpu:3")
    df = by_id(comparison_table([run("s", "single", 1, 100.0), oom]))
    assert df.loc["m4", "status"] == "oom"
    assert df.loc["m4", "reason"] == "out of memory on gpu:3"
    # The partial throughput of an unfinished run must not leak into the comparison.
    for column in ("throughput_samples_s", "step_time_s", "speedup", "efficiency"):
        assert math.isnan(df.loc["m4", column]), column


def test_without_single_run_the_one_device_run_is_the_baseline():
    df = by_id(comparison_table([run("d1", "data", 1, 50.0), run("d2", "data", 2, 80.0)]))
    assert df.loc["d2", "speedup"] == pytest.approx(1.6)
    assert df.loc["d2", "efficiency"] == pytest.approx(0.8)


def test_single_run_wins_over_earlier_one_device_run_and_first_single_is_used():
    df = by_id(
        comparison_table(
            [
                run("m1", "model", 1, 400.0),
                run("s1", "single", 1, 100.0),
                run("s2", "single", 1, 50.0),
                run("d2", "data", 2, 200.0),
            ]
        )
    )
    assert df.loc["d2", "speedup"] == pytest.approx(2.0)
    assert df.loc["m1", "speedup"] == pytest.approx(4.0)
    assert df.loc["s2", "speedup"] == pytest.approx(0.5)


def test_no_finished_baseline_gives_nan_speedup():
    rows = [
        run("s", "single", 1, None, status="crashed", reason="segfault"),
        run("d2", "data", 2, 200.0),
    ]
    df = by_id(comparison_table(rows))
    assert math.isnan(df.loc["d2", "speedup"])
    assert math.isnan(df.loc["d2", "efficiency"])


def test_speedup_is_computed_within_each_experiment():
    rows = [
        run("a1", "single", 1, 100.0, experiment_id="a"),
        run("b1", "single", 1, 10.0, experiment_id="b"),
        run("a2", "data", 2, 150.0, experiment_id="a"),
        run("b2", "data", 2, 15.0, experiment_id="b"),
        run("c2", "data", 2, 15.0, experiment_id="c"),
    ]
    df = by_id(comparison_table(rows))
    assert df.loc["a2", "speedup"] == pytest.approx(1.5)
    assert df.loc["b2", "speedup"] == pytest.approx(1.5)
    assert math.isnan(df.loc["c2", "speedup"])


def test_weak_scaling_speedup_is_the_throughput_ratio():
    rows = [
        run("s", "single", 1, 100.0, scaling="weak", global_batch=64),
        run("d2", "data", 2, 180.0, scaling="weak", global_batch=128),
    ]
    df = by_id(comparison_table(rows))
    assert df.loc["d2", "speedup"] == pytest.approx(1.8)
    assert df.loc["d2", "efficiency"] == pytest.approx(0.9)
    assert df.loc["d2", "scaling"] == "weak"


def test_peak_memory_is_the_largest_device_and_nan_without_figures():
    rows = [
        run("d2", "data", 2, 200.0, peak_memory_bytes={"gpu:0": 10, "gpu:1": 30}),
        run("s", "single", 1, 100.0),
    ]
    df = by_id(comparison_table(rows))
    assert df.loc["d2", "peak_memory_bytes"] == 30
    assert math.isnan(df.loc["s", "peak_memory_bytes"])


def test_measured_rows_are_not_projected_and_keep_their_order():
    df = comparison_table([run("z", "data", 2, 1.0), run("a", "single", 1, 1.0)])
    assert list(df["run_id"]) == ["z", "a"]
    assert df["projected"].dtype == bool
    assert not df["projected"].any()


def test_empty_results_give_an_empty_table_with_columns():
    df = comparison_table([])
    assert df.empty
    assert list(df.columns) == list(ALL_COLUMNS)


def sample_table():
    return comparison_table(
        [
            run("s", "single", 1, 123.456789, peak_memory_bytes={"cpu:0": 3 * 2**20}),
            run("d2", "data", 2, 12000.4),
            run("m4", "model", 4, None, status="timeout", reason="no step finished in " + "x" * 80),
        ]
    )


def test_markdown_rounds_to_four_significant_digits_and_shows_mib():
    text = markdown_table(sample_table())
    lines = text.splitlines()
    assert lines[0].startswith("| run_id")
    assert "peak_memory_mib" in lines[0]
    assert "peak_memory_bytes" not in lines[0]
    assert " 123.5 |" in text
    assert "123.456" not in text
    assert " 12,000 |" in text
    assert " 3 |" in text  # 3 MiB
    assert "timeout" in text
    assert len(lines) == 2 + 3


def test_format_table_is_compact_and_cuts_long_reasons():
    text = format_table(sample_table())
    lines = text.splitlines()
    assert lines[0].split() == [
        "strategy", "devices", "virtual", "schedule", "M", "batch", "status", "step_ms",
        "samples/s", "speedup", "eff", "comm", "peak_MiB", "reason",
    ]  # fmt: skip
    assert len(lines) == 4
    assert max(len(line) for line in lines) <= 140
    assert "…" in lines[3]
    assert "timeout" in lines[3]
    # 12000.4 / 123.456789 = 97.2, / 2 devices; the step 64 / 12000.4 s in ms
    assert lines[2].split()[5:9] == ["5.33", "12,000", "97.2×", "4860%"]


def test_format_table_cuts_a_reason_between_words_and_shows_speedup_intervals():
    table = comparison_table(
        [
            run("s", "single", 1, 100.0),
            run("d", "data", 2, 162.0),
            run("f", "data", 4, None, status="oom", reason="need 21.5 MiB of parameters here"),
        ]
    )
    table["speedup_ci_low"] = [0.95, 1.48, None]
    table["speedup_ci_high"] = [1.05, 1.75, None]
    lines = format_table(table).splitlines()
    assert "1.62× (1.48–1.75)" in lines[2]
    assert lines[3].rstrip().endswith("need 21.5 MiB of parameters…")  # not "h…"


def test_format_table_of_no_runs():
    assert format_table(comparison_table([])) == "(no runs)"


def test_micro_batches_is_blank_for_strategies_without_them():
    from gpu_parallel_kit.analysis.tables.comparison_table import markdown_table

    row = RunResult(
        run_id="a",
        experiment_id="e",
        strategy="single",
        devices=1,
        virtual=False,
        status="ok",
        step_time_s=0.1,
        throughput_samples_s=100.0,
        global_batch=10,
    )
    table = comparison_table([row])
    assert table["micro_batches"].isna().all()
    assert "<NA>" not in markdown_table(table)


def test_pipeline_figures_come_from_the_result_and_stay_blank_elsewhere():
    pipeline = dataclasses.replace(
        run("b", "model", 2, 80.0),
        schedule="gpipe",
        micro_batches=4,
        extra={
            "bubble_fraction": 0.3,
            "bubble_theoretical": 0.2,
            "bubble_simulated": 0.25,
            "simulated_step_time_s": 0.05,
        },
    )
    df = comparison_table([run("a", "single", 1, 100.0), pipeline])
    assert df.loc[1, "bubble_fraction"] == 0.3 and df.loc[1, "simulated_step_time_s"] == 0.05
    assert df.loc[0, ["bubble_fraction", "bubble_simulated"]].isna().all()


def _tuned(spe: int, xla: bool = False) -> dict:
    return {"tuned": {"tune": "auto", "steps_per_execution": spe, "jit_compile": xla}}


def test_the_table_says_what_each_run_trained_with():
    df = by_id(
        comparison_table(
            [
                run("s", "single", 1, 100.0, extra=_tuned(8)),
                run("x", "single", 1, 120.0, extra=_tuned(4, xla=True)),
                run("old", "single", 1, 90.0),  # logged before tune: blank, not a default
            ]
        )
    )
    assert (df.loc["s", "tune"], df.loc["s", "steps_per_execution"]) == ("auto", 8)
    assert bool(df.loc["x", "jit_compile"]) and not bool(df.loc["s", "jit_compile"])
    assert df.loc["old", "tune"] == "" and df["steps_per_execution"].isna()["old"]
    header = format_table(df.reset_index()).splitlines()[0].split()
    assert header[-3:] == ["spe", "xla", "reason"]
    # Rows from before tune show no such column at all.
    old = format_table(comparison_table([run("old", "single", 1, 90.0)]))
    assert "spe" not in old.splitlines()[0].split()


def test_rows_timed_over_different_steps_per_execution_say_which_and_why():
    from gpu_parallel_kit.analysis.tables.compact_view import notes_lines
    from gpu_parallel_kit.runs.description.tuning_rules import choose_settings

    def tuned(strategy, mode, devices):
        settings = choose_settings(
            tune="auto", backend="tensorflow", strategy=strategy, mode=mode, device_kind="cpu",
            devices=devices, steps_per_epoch=24, total_steps=24, warmup_steps=2,
        )  # fmt: skip
        return {"tuned": settings.to_dict()}

    same = comparison_table(
        [run("s", "single", 1, 100.0, extra=tuned("single", "fit", 1)),
         run("d", "data", 2, 150.0, extra=tuned("data", "fit", 2))]
    )  # fmt: skip
    assert "steps per execution: 4 (tune or yours;" in " ".join(notes_lines(same))
    mixed = comparison_table(
        [run("s", "single", 1, 100.0, extra=tuned("single", "fit", 1)),
         run("d1", "data", 1, 90.0, extra=tuned("data", "fit", 1)),
         run("d2", "data", 2, 150.0, extra=tuned("data", "fit", 2)),
         run("m", "multiworker", 2, 9.0, extra=tuned("multiworker", "explicit", 2))]
    )  # fmt: skip
    note = next(n for n in notes_lines(mixed) if n.startswith("steps per execution"))
    assert note.startswith(
        "steps per execution: 4 for single×1, data×1 and data×2; 1 for multiworker×2 "
        "(strategy='multiworker': its own loop takes one step per call). A step's time is its "
        "execution's time / its steps"
    )


def test_communication_not_measured_is_said_in_words_never_zero():
    from gpu_parallel_kit.analysis.tables.compact_view import compact_frame, notes_lines

    extra = {"comm_measured": False, **_tuned(8)}
    skipped = run("d", "data", 2, 150.0, comm_bytes=4096, extra=extra)
    df = comparison_table([run("s", "single", 1, 100.0, extra=_tuned(8)), skipped])
    row = by_id(df).loc["d"]
    assert not row["comm_measured"] and math.isnan(row["comm_time_s"])
    assert math.isnan(row["compute_time_s"])  # the step's split is unknown, not all compute
    assert "not measured" in format_table(df) and "not measured" in markdown_table(df)
    assert list(compact_frame(df)["comm share"]) == ["", "not measured"]
    assert any("execution's time / its steps" in note for note in notes_lines(df))


def test_every_row_says_its_devices_on_each_plan_axis():
    rows = [
        run("a", "single", 1, 100.0),
        run("b", "data", 4, 300.0),
        run("c", "tensor", 4, 200.0, mesh="2x2"),
        run("d", "pipeline", 4, 200.0),
        run("e", "pipeline", 8, 200.0, mesh="2x2"),
    ]
    table = comparison_table(rows)
    shapes = [tuple(row) for row in table[["data", "tensor", "stages"]].itertuples(index=False)]
    assert shapes == [(1, 1, 1), (4, 1, 1), (2, 2, 1), (1, 1, 4), (2, 2, 2)]
    assert str(table["stages"].dtype) == "int64"
