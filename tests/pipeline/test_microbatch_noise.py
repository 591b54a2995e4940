"""`micro_batches="auto"` on a noisy curve: each M against M=1 round by round, M=1 kept when no
M beats it beyond the rounds' noise, and the close M's named for more rounds."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.pipeline.microbatch import (
    Curve,
    CurvePoint,
    auto_note,
    candidates,
    choose,
    margin,
    simulated_step,
)

STAGES, BATCH = 2, 8


def rounds_curve(load: list[dict[int, float]], fixed: float = 1.0, per_sample: float = 1.0):
    """Each task costs (fixed + per_sample · n) · load[round][n] at size n in each round."""
    points = []
    for s in range(STAGES):
        for k, weight in (("F", 1.0), ("B", 2.0)):
            for n in (8, 4, 2, 1):
                samples = tuple(weight * (fixed + per_sample * n) * r[n] for r in load)
                points.append(CurvePoint(s, k, n, min(samples), samples))
    return Curve(tuple(points))


def fastest_m(curve: Curve) -> int:
    valid = candidates("gpipe", STAGES, BATCH)
    return min(valid, key=lambda m: (simulated_step(curve, "gpipe", STAGES, m, BATCH)[0], m))


def test_differences_below_the_noise_keep_m_1_and_ask_for_more_rounds():
    # A burst of load lands on the whole batch in one round and on the small sizes in the next:
    # each size's fastest round makes M=4 look shorter, round by round it is not.
    noisy = rounds_curve(
        [{8: 1.6, 4: 1.0, 2: 1.0, 1: 1.0}, {8: 1.0, 4: 1.6, 2: 1.6, 1: 1.6}],
        fixed=0.5,
    )
    assert fastest_m(noisy) != 1  # the fastest times alone would pick a larger M
    choice = choose(noisy, "gpipe", STAGES, BATCH)
    assert (choice.micro_batches, choice.best, choice.against) == (1, 1, 1)
    assert choice.margin is not None and not choice.margin.beyond_noise
    assert choice.margin.rounds == 2 and choice.margin.shorter > 0
    assert 1 in choice.measure_again and choice.margin.micro_batches in choice.measure_again
    assert choice.reason.startswith("M=1: step on the curve ")
    assert f"M={choice.margin.micro_batches}'s " in choice.reason
    assert "is within noise over 2 paired rounds" in choice.reason
    assert auto_note(choice.to_dict()) == "auto, none beyond noise of M=1"


def test_more_rounds_that_agree_settle_it_and_the_row_says_by_how_much():
    noisy = rounds_curve(
        [{8: 1.6, 4: 1.0, 2: 1.0, 1: 1.0}, {8: 1.0, 4: 1.6, 2: 1.6, 1: 1.6}],
        fixed=0.5,
    )
    first = choose(noisy, "gpipe", STAGES, BATCH)
    quiet = {n: 1.0 for n in (8, 4, 2, 1)}
    again = rounds_curve([quiet, quiet, quiet], fixed=0.5)
    more = {
        (p.stage, p.kind, p.size): p.samples
        for p in again.points
        if BATCH // p.size in first.measure_again
    }
    settled = choose(noisy.with_rounds(more, cost_s=0.1), "gpipe", STAGES, BATCH)
    shown = settled.margin
    assert settled.micro_batches > 1 and shown is not None and shown.beyond_noise
    assert (shown.micro_batches, shown.against, shown.rounds) == (settled.micro_batches, 1, 5)
    step = settled.option(settled.micro_batches).step_s
    assert settled.reason.startswith(f"M={settled.micro_batches}: step on the curve ")
    assert f"shorter than M=1's {settled.option(1).step_s * 1e3:.3g} ms" in settled.reason
    assert "over 5 paired rounds" in settled.reason and step < settled.option(1).step_s
    note = auto_note(settled.to_dict())
    assert note.startswith("auto, ") and note.endswith(" under M=1") and " ± " in note


def test_a_margin_is_paired_round_by_round():
    # The same 10% advantage in every round, under loads that change from round to round.
    load = [{n: f for n in (8, 4, 2, 1)} for f in (1.0, 1.5, 1.2)]
    curve = rounds_curve(load, fixed=0.0)
    shown = margin(curve, "gpipe", STAGES, BATCH, 4, 1)
    expected = (
        1
        - simulated_step(curve, "gpipe", STAGES, 4, BATCH)[0]
        / (simulated_step(curve, "gpipe", STAGES, 1, BATCH)[0])
    )
    assert shown.rounds == 3 and shown.noise == pytest.approx(0.0, abs=1e-12)
    assert shown.shorter == pytest.approx(expected) and shown.beyond_noise
    assert choose(curve, "gpipe", STAGES, BATCH).measure_again == ()


def test_a_curve_without_rounds_round_trips_and_compares_on_its_fastest_times():
    plain = Curve((CurvePoint(0, "F", 8, 2.0), CurvePoint(0, "F", 4, 0.5)))
    assert Curve.from_dict(plain.to_dict()) == plain and plain.rounds(8) == 0
    kept = rounds_curve([{8: 1.0, 4: 1.0, 2: 1.0, 1: 1.0}] * 2)
    assert Curve.from_dict(kept.to_dict()) == kept and kept.rounds(4) == 2
    old_row = {"points": [{"stage": 0, "kind": "F", "size": 8, "seconds": 2.0}]}
    assert Curve.from_dict(old_row).points[0].samples == ()


def test_the_table_and_the_compact_view_say_what_auto_chose_against_what():
    from gpu_parallel_kit.analysis.tables.compact_view import run_text
    from gpu_parallel_kit.analysis.tables.comparison_table import comparison_table
    from gpu_parallel_kit.runs.results.run_result import RunResult

    quiet = {n: 1.0 for n in (8, 4, 2, 1)}
    choice = choose(rounds_curve([quiet] * 3, fixed=0.5), "gpipe", STAGES, BATCH)
    rows = [
        RunResult(
            run_id=name,
            experiment_id="exp",
            strategy="pipeline",
            devices=STAGES,
            virtual=True,
            status="ok",
            global_batch=BATCH,
            schedule="gpipe",
            micro_batches=chosen.micro_batches,
            extra={"microbatch_choice": chosen.to_dict()},
        )
        for name, chosen in (
            ("auto", choice),
            ("given", choose(choice_curve(), "gpipe", 2, 8, given=2)),
        )
    ]
    table = comparison_table(rows)
    note = auto_note(choice.to_dict())
    assert list(table["micro_batches_auto"]) == [note, ""]
    assert note.replace(" ", "\N{NO-BREAK SPACE}") in run_text(table.iloc[0])
    assert "auto" not in run_text(table.iloc[1])


def choice_curve() -> Curve:
    return rounds_curve([{n: 1.0 for n in (8, 4, 2, 1)}] * 2)


def test_the_reason_gives_the_paired_rounds_figures_so_shorter_reads_shorter():
    # M=1's fastest round is a lucky one that M=2's sizes did not share: the fastest times
    # would print M=2 as the longer while the rounds, paired, say it is shorter.
    import re

    lucky = {8: 0.2, 4: 1.0, 2: 1.0, 1: 1.0}
    usual = {8: 1.0, 4: 0.8, 2: 0.8, 1: 0.8}
    curve = rounds_curve([lucky, usual, usual], fixed=0.5)
    choice = choose(curve, "gpipe", STAGES, BATCH)
    shown = choice.margin
    assert shown is not None and shown.shorter > 0 and choice.best > 1
    assert choice.option(choice.best).step_s > choice.option(1).step_s  # the fastest rounds
    found = re.search(
        r"step on the curve ([\d.e+]+) ms, .* shorter than M=1's ([\d.e+]+) ms", choice.reason
    )
    assert found and float(found[1]) < float(found[2]), choice.reason
    assert "(medians)" in choice.reason
    assert shown.step_s < shown.against_s
    # The M named beside it is quoted the same way: its median over the rounds paired with M=1.
    other = int(re.search(r"; M=(\d+) would be", choice.reason)[1])
    paired = margin(curve, "gpipe", STAGES, BATCH, other, 1)
    assert choice.reason.endswith(f"({paired.step_s * 1e3:.3g} ms)")
