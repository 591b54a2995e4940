"""The headline figures of overhead.py, from its raw per-run figures; no TensorFlow here."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

# The targets: a run of a comparison costs at most 0.5 s beyond training; the first run in a
# kernel at most 3 s with device discovery; the kit's median step beats the hand-written
# program's (Keras's defaults) by 5 % on the MLP and is no slower on any model, and against the
# hand-written program at the kit's own steps per execution, the kit's tax per step (timing
# callbacks, recorder, progress events) is at most 2 %.
FIXED_COST_TARGET_S = 0.5
FIRST_RUN_TARGET_S = 3.0
DEMO_TARGET_S = 10.0  # gpk demo, the whole command
STEP_RATIO_TARGET = 1.05  # the MLP
STEP_RATIO_FLOOR = 1.0  # every model
TUNED_RATIO_FLOOR = 0.98  # every model, against the hand-written program at tune's settings


def _summarise(report: dict[str, Any]) -> dict[str, Any]:
    """The headline figures, medians over runs or rounds; per model under "models"."""
    summary: dict[str, Any] = {}
    for method, fixed in report.get("fixed", {}).items():
        summary[f"{method}_first_run_total_s"] = fixed["first"]["parent_total_s"]
        summary[f"{method}_first_run_fixed_s"] = fixed["first"]["fixed_s"]
        summary[f"{method}_fixed_s"] = fixed["later_median"]["fixed_s"]
        summary[f"{method}_parent_fixed_s"] = fixed["later_median"]["parent_fixed_s"]
    if "throughput" in report:
        summary["models"] = {
            name: _throughput_summary(sides) for name, sides in report["throughput"].items()
        }
    return summary


def _throughput_summary(sides: dict[str, Any]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    kit, hand = sides["kit"], sides["hand"]
    for side, rows in (("kit", kit), ("hand", hand)):
        summary[f"{side}_samples_per_s"] = _median(rows, "samples_per_s")
        summary[f"{side}_step_time_s"] = _median(rows, "step_time_s")
        summary[f"{side}_parent_fixed_s"] = _median(rows, "parent_fixed_s")
        summary[f"{side}_parent_total_s"] = _median(rows, "parent_total_s")
        summary[f"{side}_after_training_s"] = _median(rows, "after_training_s")
        summary[f"{side}_epoch_first_step_s"] = statistics.median(
            t for row in rows for t in row["epoch_first_steps_s"]
        )
    summary["kit_fixed_s"] = _median(kit, "fixed_s")
    # Paired within each round (kit and hand run back to back), so drift of the machine's
    # speed between rounds cancels out; then the median over rounds.
    pairs = list(zip(kit, hand, strict=True))
    summary["ratio_epoch_throughput"] = statistics.median(
        k["samples_per_s"] / h["samples_per_s"] for k, h in pairs
    )
    summary["ratio_step_throughput"], summary["ratio_step_range"] = _step_ratios(kit, hand)
    tuned = sides.get("hand_tuned") or []
    if tuned:
        summary["hand_tuned_step_time_s"] = _median(tuned, "step_time_s")
        summary["ratio_step_tuned"], summary["ratio_tuned_range"] = _step_ratios(kit, tuned)
    summary["tuned"] = kit[-1].get("tuned", {})
    return summary


def print_summary(report: dict[str, Any], load: str) -> None:
    summary = report["summary"] = _summarise(report)
    print("\n== Summary")
    print(
        "caller's device discovery (starts the fork server, which imports TensorFlow; once per "
        "kernel, before the first run): "
        f"{report['caller_discovery_s']:.2f} s"
    )
    for method, fixed in report.get("fixed", {}).items():
        first, later = fixed["first"], fixed["later_median"]
        what = "the fork server is already up: device discovery started it"
        if method == "spawn":
            what = "a fresh interpreter, as every spawn run is"
        first_in_kernel = report["caller_discovery_s"] + first["parent_total_s"]
        # No head start: the run is asked for as soon as the kit is imported, so this is not the
        # figure the 3 s target is for (FIRST RESULT below, 5 s after loading).
        print(
            f"[{method}] first run ({what}): {first['parent_total_s']:.2f} s around exp.run, "
            f"fixed cost {first['fixed_s']:.2f} s; with discovery {first_in_kernel:.2f} s "
            "(asked for with no head start: the target is for FIRST RESULT below)"
        )
        print(
            f"[{method}] fixed cost of one isolated exp.run, median of {len(fixed['runs']) - 1} "
            f"later runs: {later['fixed_s']:.2f} s = process - training (nothing to overlap "
            f"with); {later['parent_fixed_s']:.2f} s beyond training "
            f"around exp.run ({later['parent_total_s']:.2f} s in all)\n"
            f"    to worker {later['to_worker_s']:.2f} s, devices {later['devices_s']:.2f} s, "
            f"build+compile {later['build_s']:.2f} s, fit setup {later['fit_setup_s']:.2f} s, "
            "after training "
            f"{later['after_training_s']:.2f} s"
        )
    for backend, figures in report.get("comparison", {}).items():
        ahead, in_turn = figures["ahead_median_s"], figures["in_turn_median_s"]
        verdict = "meets" if ahead <= FIXED_COST_TARGET_S else "MISSES"
        print(
            f"[{backend}] FIXED COST PER RUN OF A COMPARISON ({figures['runs']} runs, each a new "
            f"configuration, communication measured in every one; median of "
            f"{len(figures['ahead_s'])} comparisons): {ahead:.2f} s beyond the runs' training "
            f"alone, the kit's way: set up side by side, trained one at a time ({verdict} the "
            f"{FIXED_COST_TARGET_S:g} s target); {figures['own_rows_median_s']:.2f} s beyond "
            f"their own rows' training; {in_turn:.2f} s with runs started in turn"
        )
        print(
            f"[{backend}] fixed cost of a repeated configuration (a later round, trained by its "
            f"first round's process where it may, reusing its communication figures): "
            f"{figures['repeated_s']:.2f} s; {figures['rounds_median_s']:.2f} s per run of a "
            "3-round comparison, its first round included"
        )
    first = report.get("first", {})
    for backend, values in first.items():
        if backend.startswith("demo_wall") or not values:
            continue
        verdict = "meets" if statistics.median(values) <= FIRST_RUN_TARGET_S else "MISSES"
        print(
            f"[{backend}] FIRST RESULT 5 s after loading the kit, servers warmed ahead: "
            f"{statistics.median(values):.2f} s (range {min(values):.2f}–{max(values):.2f}; "
            f"{verdict} the {FIRST_RUN_TARGET_S:g} s target)"
        )
    if first.get("demo_wall_s"):
        walls = first["demo_wall_s"]
        verdict = "meets" if statistics.median(walls) <= DEMO_TARGET_S else "MISSES"
        print(
            f"GPK DEMO, whole command, as after install (a fresh folder: the step is counted): "
            f"{statistics.median(walls):.1f} s, range {min(walls):.1f}–{max(walls):.1f} "
            f"({verdict} the {DEMO_TARGET_S:g} s target)"
        )
    if first.get("demo_wall_tensorflow_s"):
        walls = first["demo_wall_tensorflow_s"]
        print(
            f"gpk demo --backend tensorflow: {statistics.median(walls):.1f} s, range "
            f"{min(walls):.1f}–{max(walls):.1f}"
        )
    for name, model_summary in summary.get("models", {}).items():
        _print_throughput(name, model_summary)
    if "models" in summary:
        _print_verdict(summary["models"])
    print(
        f"benchmark wall time: {report['benchmark_s']:.0f} s; load average now {load} "
        "(other work on the machine's cores skews every figure: run it on a quiet machine)"
    )


def _print_verdict(models: dict[str, dict[str, Any]]) -> None:
    print("\n== Step ratio kit/hand per model (median of per-round ratios; >= 1.0: kit faster)")
    print("model        ratio  rounds' range  kit ms   hand ms  kit trained with")
    for name, m in models.items():
        goal = STEP_RATIO_TARGET if name == "mlp" else STEP_RATIO_FLOOR
        verdict = _verdict(m["ratio_step_throughput"], m["ratio_step_range"], goal)
        tuned = m.get("tuned") or {}
        how = f"{tuned.get('steps_per_execution', '?')} steps/execution" + (
            ", XLA" if tuned.get("jit_compile") else ""
        )
        print(
            f"{name:<11} {m['ratio_step_throughput']:>6.3f}  {_range(m['ratio_step_range'])}  "
            f"{m['kit_step_time_s'] * 1e3:>7.1f}  {m['hand_step_time_s'] * 1e3:>8.1f}  {how}  "
            f"({verdict}, goal >= {goal:g})"
        )
    print(
        "\n== The kit's own tax per step: kit/hand at the kit's steps per execution "
        f"(>= {TUNED_RATIO_FLOOR:g}: at most 2 % slower)"
    )
    print("model        ratio  rounds' range  kit ms   hand ms")
    for name, m in models.items():
        if "ratio_step_tuned" not in m:
            continue
        verdict = _verdict(m["ratio_step_tuned"], m["ratio_tuned_range"], TUNED_RATIO_FLOOR)
        print(
            f"{name:<11} {m['ratio_step_tuned']:>6.3f}  {_range(m['ratio_tuned_range'])}  "
            f"{m['kit_step_time_s'] * 1e3:>7.1f}  {m['hand_tuned_step_time_s'] * 1e3:>8.1f}  "
            f"({verdict})"
        )


def _print_throughput(name: str, summary: dict[str, Any]) -> None:
    print(f"-- {name}")
    print(
        "THROUGHPUT, samples/s over the epochs after the first (medians over rounds; the ratio "
        "is the median of the per-round ratios): "
        f"kit {summary['kit_samples_per_s']:.0f}, hand-written "
        f"{summary['hand_samples_per_s']:.0f} -> ratio kit/hand "
        f"{summary['ratio_epoch_throughput']:.3f}"
    )
    print(
        "STEP TIME, median step (medians over rounds; ratio: median of per-round ratios): "
        f"kit {summary['kit_step_time_s'] * 1e3:.1f} ms, hand-written "
        f"{summary['hand_step_time_s'] * 1e3:.1f} ms -> ratio kit/hand "
        f"{summary['ratio_step_throughput']:.3f}"
    )
    print("    (ratios >= 1.0: the kit is at least as fast)")
    print(
        "first step of each later epoch (median): "
        f"kit {summary['kit_epoch_first_step_s'] * 1e3:.0f} ms, hand-written "
        f"{summary['hand_epoch_first_step_s'] * 1e3:.0f} ms (fit on arrays makes a new "
        "distributed iterator every epoch; the kit keeps one over repeating data)"
    )
    print(
        "after the last step until the caller has the result (median): kit "
        f"{summary['kit_after_training_s']:.2f} s, hand-written "
        f"{summary['hand_after_training_s']:.2f} s (fit's return tears down its input "
        "iterator; the hand-written program also tears down its interpreter)"
    )
    print(
        "beyond training, per throughput run (median): kit "
        f"{summary['kit_fixed_s']:.2f} s = process - training, "
        f"{summary['kit_parent_fixed_s']:.2f} s around exp.run; hand-written "
        f"{summary['hand_parent_fixed_s']:.2f} s (a fresh interpreter each time)"
    )


def _step_ratios(
    kit: Sequence[dict[str, Any]], hand: Sequence[dict[str, Any]]
) -> tuple[float, tuple[float, float]]:
    """Hand's median step over the kit's, paired round by round: the median, and the lowest and
    highest pair."""
    ratios = [h["step_time_s"] / k["step_time_s"] for k, h in zip(kit, hand, strict=True)]
    return statistics.median(ratios), (min(ratios), max(ratios))


def _verdict(ratio: float, bounds: tuple[float, float], goal: float) -> str:
    """Met or missed by the median, and said to be within the rounds' noise when one round's
    pair fell on the other side of the goal."""
    verdict = "meets" if ratio >= goal else "MISSES"
    if bounds[0] < goal <= bounds[1]:
        verdict += ", within the rounds' noise"
    return verdict


def _range(bounds: tuple[float, float]) -> str:
    """The per-round ratios' lowest and highest: how far one round's pair can be off the median,
    which a single invocation's verdict rests on."""
    return f"{bounds[0]:.3f}–{bounds[1]:.3f}"


def _median(rows: Sequence[dict[str, Any]], key: str) -> float:
    return statistics.median(row[key] for row in rows)
