"""Spreads and intervals a reader can read: a step measured in rounds carries its interval over
the rounds, and an interval too wide to tell anything says so and names the fix."""

from __future__ import annotations

from gpu_parallel_kit.analysis.tables.advice import advice
from gpu_parallel_kit.analysis.tables.cell_text import ratio_text
from gpu_parallel_kit.analysis.tables.compact_view import compact_frame, notes_lines
from gpu_parallel_kit.analysis.tables.comparison_table import comparison_table, format_table
from gpu_parallel_kit.analysis.tables.interval_cells import too_few_steps_to_tell
from gpu_parallel_kit.runs.results.run_result import RunResult
from gpu_parallel_kit.runs.scheduling.comparison_rounds import merge_rounds
from gpu_parallel_kit.runs.scheduling.step_intervals import too_wide


def plain(cells) -> list[str]:
    return [cell.replace("\xa0", " ") for cell in cells]


def run(run_id, strategy, devices, steps, round_of=None, **kw):
    steps = [s / 1000 for s in steps]
    ordered = sorted(steps)
    fields = dict(
        experiment_id="e", virtual=True, status="ok", global_batch=256,
        step_time_s=ordered[len(ordered) // 2], step_times_s=steps,
        step_time_spread_s=ordered[3 * len(ordered) // 4] - ordered[len(ordered) // 4],
        throughput_samples_s=256 / ordered[len(ordered) // 2],
        extra={} if round_of is None else {"configuration": run_id[:-1], "round": round_of},
    )  # fmt: skip
    fields.update(kw)
    return RunResult(run_id=run_id, strategy=strategy, devices=devices, **fields)


def test_a_step_measured_in_rounds_shows_its_interval_over_the_rounds_in_ms():
    # Round 1's steps scatter (interquartile range 12.7 ms, more than the step); the rounds agree.
    first = run("d1", "data", 1, [7.3, 7.4, 7.39, 7.5, 1.0, 20.0, 1.0, 20.0], round_of=[1, 3])
    assert first.step_time_spread_s > first.step_time_s
    rounds = [
        first,
        run("d2", "data", 1, [7.2, 7.3, 7.4, 7.5, 7.3, 7.4, 7.2, 7.5], round_of=[2, 3]),
        run("d3", "data", 1, [7.4, 7.5, 7.6, 7.3, 7.5, 7.4, 7.6, 7.3], round_of=[3, 3]),
    ]
    merged = merge_rounds(rounds)
    single = run("s", "single", 1, [7.0] * 8)
    table = comparison_table([single, merged])
    step = plain(compact_frame(table)["step (ms)"])
    assert step[0] == "7 ± 0"  # measured once: its median and interquartile range
    assert "±" not in step[1] and "12.7" not in step[1]
    low, high = merged.step_time_ci_low_s * 1000, merged.step_time_ci_high_s * 1000
    assert step[1] == f"7.4\n({low:.3g}–{high:.3g})"  # ms, as the step
    assert low <= 7.4 <= high
    assert any("over steps and rounds" in note for note in notes_lines(table))


def test_an_interval_too_wide_to_read_says_so_and_names_the_fix_in_every_view():
    assert too_wide(0.251, 6.85) and too_wide(0.0, 1.0) and too_wide(1.0, 2.01)
    assert not too_wide(1.0, 2.0) and not too_wide(1.48, 1.75) and not too_wide(None, 1.0)
    assert ratio_text(1.66, 0.251, 6.85) == "1.66× (too few steps to tell)"
    assert ratio_text(1.62, 1.481, 1.7549) == "1.62× (1.48–1.75)"
    table = comparison_table(
        [run("s", "single", 1, [7.0] * 8), run("d", "data", 1, [4.2] * 8, extra={"rounds": 2})]
    )
    table["rounds"] = [2, 2]
    table["speedup_ci_low"] = [float("nan"), 0.251]
    table["speedup_ci_high"] = [float("nan"), 6.85]
    table["step_time_ci_low_s"] = [0.0069, 0.0011]
    table["step_time_ci_high_s"] = [0.0071, 0.0120]
    frame = compact_frame(table)
    assert plain(frame["speedup (95% CI)"]) == ["1×", "1.67×\ntoo few steps to tell"]
    assert plain(frame["step (ms)"]) == ["7\n(6.9–7.1)", "4.2\ntoo few steps to tell"]
    notes = " ".join(notes_lines(table))
    assert "more steps" in notes and "rounds" in notes
    text = format_table(table)
    assert "too few steps to tell" in text and "more steps" in text
    assert "0.251" not in text and "6.85" not in text
    said = advice(table)
    assert "too few steps to tell" in said and "6.85" not in said
    assert too_few_steps_to_tell(table) == ["data×1"]  # the rows a notebook names
    assert "measure_s=" in notes and "were fixed" not in notes
    # Rounds the caller fixed: the note says no more were measured, and how to get more.
    table["measured_until"] = ["rounds fixed", "rounds fixed"]
    fixed = " ".join(notes_lines(table))
    assert "rounds were fixed (rounds= or GPK_ROUNDS)" in fixed and "measure_s=" not in fixed
    table["step_time_ci_low_s"] = [0.0069, 0.0040]
    table["step_time_ci_high_s"] = [0.0071, 0.0045]
    table["speedup_ci_low"] = [float("nan"), 1.5]
    table["speedup_ci_high"] = [float("nan"), 1.9]
    assert too_few_steps_to_tell(table) == []
