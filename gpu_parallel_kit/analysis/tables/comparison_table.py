"""The comparison table: one row per run, with speedup and scaling efficiency worked out.

The table is the kit's main output. Notebooks show it, reports paste it, plots and the run log are
built from it. It is computed from plain `RunResult`s with pandas alone, never TensorFlow, so it can
be rebuilt in any process from the run log long after the runs finished.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from ...pipeline.microbatch import auto_note
from ...runs.results.below_noise import settle_communication, shown_noise
from ...runs.results.run_result import RunResult
from ..cost_model.speedup_baseline import Candidate, baseline_index
from .cell_text import (
    display_frame,
    mark_below_noise,
    mark_not_measured,
    mark_not_reached,
    parse_number,
)
from .memory_by_part import COMPONENTS, fullest_components
from .plan_columns import PLAN_COLUMNS, plan_cells, with_ran_plans
from .readable_frame import RunFrame
from .step_breakdown import effective_bandwidth, step_breakdown
from .table_intervals import INTERVAL_COLUMNS, interval_cells, with_speedup_intervals
from .terminal_table import format_table, is_numeric
from .time_to_accuracy import convergence_cells, has_convergence

# format_table lives with the terminal's cells (analysis/tables/terminal_table.py); callers import
# it here.
__all__ = ["comparison_table", "format_table", "markdown_table"]

# The public contract (docs/ARCHITECTURE.md): scripts and notebooks rely on these names and this
# order.
COLUMNS: tuple[str, ...] = (
    "run_id",
    "strategy",
    "devices",
    "virtual",
    "schedule",
    "micro_batches",
    "global_batch",
    "status",
    "reason",
    "wall_time_s",
    "step_time_s",
    "step_time_spread_s",
    "throughput_samples_s",
    "speedup",
    "efficiency",
    "peak_memory_bytes",
    "comm_time_s",
    "comm_share",
    "comm_bytes",
    "projected",
)
# Context that says how to read the figures (scaling mode, where and when the run happened).
EXTRA_COLUMNS: tuple[str, ...] = (
    "backend",  # tensorflow (tf.distribute) | jax (keras.distribution): speedups stay within one
    "mesh",  # tensor parallel: data x model devices
    *PLAN_COLUMNS,  # devices on each plan axis, as `Plans.table` names them
    "workers",
    "nodes",
    "devices_per_worker",
    "scaling",
    "mode",
    "all_reduce",
    "device_kind",
    "epochs",
    "steps_per_epoch",
    "timed_steps",
    "startup_s",
    # The steady-state training time: step_time_s x epochs x steps_per_epoch, warm-up and
    # compilation left out, as the rounds measured it. wall_time_s is one round's, first step
    # included; the time panel of `Comparison.plot()` draws this one.
    "training_time_s",
    # What the run trained with (runs/description/tuning_rules.py): tune's mode, and the settings in
    # force.
    "tune",
    "steps_per_execution",
    "steps_per_execution_why",  # who chose it, or why the run's loop takes one step per call
    "jit_compile",
    "experiment_id",
    "created_at",
)
# Pipeline figures (pipeline runs only): the bubble measured on these devices, the bubble and
# step time of the same schedule replayed on independent devices (simulated, never mixed with the
# measured columns), and the theory (K-1)/(M+K-1).
PIPELINE_COLUMNS: tuple[str, ...] = (
    "bubble_fraction",
    "bubble_theoretical",
    "bubble_simulated",
    "simulated_step_time_s",
    # What the engine itself costs: per task beyond its call and copies, per step outside tasks.
    "task_overhead_s",
    "outside_tasks_s",
)
# The fullest device's state, the activations its stage held, its parts
# (analysis/tables/memory_by_part.py).
MEMORY_COLUMNS: tuple[str, ...] = ("state_bytes", "peak_activation_bytes", *COMPONENTS)
# micro_batches="auto" in a few words: "auto, 38% ± 4% under M=1" (pipeline/microbatch.auto_note).
AUTO_COLUMNS: tuple[str, ...] = ("micro_batches_auto",)
# Where the step goes (analysis/tables/step_breakdown.py): compute beside the exposed communication,
# and the bandwidth that communication achieved. A communication figure below its own noise
# (runs/results/below_noise.py) leaves comm_time_s and comm_share NaN, comm_below_noise True and the
# noise it fell below in comm_noise_s; the signed measurement stays in the result's extra.
COMM_COLUMNS: tuple[str, ...] = (
    "compute_time_s",
    "effective_bandwidth_bytes_s",
    "comm_noise_s",
    "comm_below_noise",
    "comm_measured",  # False: measure_comm=False skipped it; the figures are blank, not zero
)
# Time to accuracy (analysis/tables/time_to_accuracy.py): the learning-rate rule as applied (the
# effective peak rate and the factor k gave it) and when each run first met the target. A run that
# never met it has NaN figures and target_reached False ("not reached" in the text tables); rows
# without a target or that did not finish have <NA> there. The speedup is in time to target, against
# the same baseline run as `speedup`, which is in samples per second.
CONVERGENCE_COLUMNS: tuple[str, ...] = (
    "learning_rate",
    "lr_scaling",
    "lr_factor",
    "warmup_epochs",
    "target",
    "target_reached",
    "time_to_target_s",
    "epochs_to_target",
    "time_to_target_speedup",
)
# A mixture of experts under `expert` (strategies/expert.py): dense or dispatched experts, the
# (token, expert) choices a dispatched run dropped of those routed (one global batch through the
# trained model), and the expert matmuls' FLOPs per step against the dense bank's.
EXPERT_COLUMNS: tuple[str, ...] = (
    "experts",
    "dropped_tokens",
    "routed_tokens",
    "expert_flops",
    "dense_expert_flops",
)
# A projected row's band (analysis/cost_model/projected_compute.py): its step at high and low
# efficiency.
BAND_COLUMNS: tuple[str, ...] = ("step_time_low_s", "step_time_high_s")
# The step the cost model predicts for a measured row from a calibration of the same devices
# (analysis/cost_model/calibrated_step.py): the step, its ratio to the measured one, and where
# that ratio leaves 0.85-1.15, the part furthest from its measured part.
PREDICTION_COLUMNS: tuple[str, ...] = (
    "predicted_step_time_s",
    "predicted_over_measured",
    "predicted_off_in",
    "predicted_from",
)
ALL_COLUMNS: tuple[str, ...] = COLUMNS + EXTRA_COLUMNS + PIPELINE_COLUMNS + AUTO_COLUMNS
ALL_COLUMNS += MEMORY_COLUMNS
ALL_COLUMNS += COMM_COLUMNS + BAND_COLUMNS + EXPERT_COLUMNS + PREDICTION_COLUMNS
ALL_COLUMNS += INTERVAL_COLUMNS + CONVERGENCE_COLUMNS

# Measured figures. A run that did not finish keeps NaN here: a partial timing from a run that
# timed out or ran out of memory is not comparable with the finished runs beside it.
FIGURE_COLUMNS: tuple[str, ...] = (
    "wall_time_s",
    "step_time_s",
    "step_time_spread_s",
    "throughput_samples_s",
    "peak_memory_bytes",
    "comm_time_s",
    "comm_share",
    "comm_bytes",
    "startup_s",
    "training_time_s",
)
# Not fields of the result: peak memory is a dict reduced to its fullest device, training time
# is worked out from the step time.
_MEASURED_SCALARS = tuple(
    c for c in FIGURE_COLUMNS if c not in ("peak_memory_bytes", "training_time_s")
)
_FLOAT_COLUMNS = (
    *FIGURE_COLUMNS,
    *PIPELINE_COLUMNS,
    *MEMORY_COLUMNS,
    *COMM_COLUMNS,
    *BAND_COLUMNS,
    *PREDICTION_COLUMNS[:2],
    "speedup",
    "efficiency",
    "learning_rate",
    "lr_factor",
    "warmup_epochs",
    "time_to_target_s",
    "epochs_to_target",
    "time_to_target_speedup",
)
_INT_COLUMNS = (
    "devices",
    "workers",
    "nodes",
    "devices_per_worker",
    "global_batch",
    "epochs",
    "steps_per_epoch",
    "timed_steps",
    *PLAN_COLUMNS,
)
# Speedups compare runs of one experiment on one backend: JAX rows against JAX's `single`.
_BASELINE_GROUP = ("experiment_id", "backend")
# Blank where the strategy has no such setting (or the row predates it).
_OPTIONAL_INT_COLUMNS = ("micro_batches", "steps_per_execution")
_BOOL_COLUMNS = ("virtual", "projected", "comm_below_noise", "comm_measured")
_OPTIONAL_BOOL_COLUMNS = ("jit_compile",)  # blank for rows from before tune

# The markdown table is for pasting into reports: the contract plus the scaling mode, which the
# reader needs to interpret speedup. The CSV keeps every column.
MARKDOWN_COLUMNS: tuple[str, ...] = (*COLUMNS, "scaling", "steps_per_execution")
# With a target or a learning-rate rule the text tables add what they need to be read; a run that
# never met the target says so in words where its time would be.
_MARKDOWN_CONVERGENCE = (
    "learning_rate",
    "lr_scaling",
    "target",
    "time_to_target_s",
    "epochs_to_target",
    "time_to_target_speedup",
)


def comparison_table(results: Sequence[RunResult]) -> pd.DataFrame:
    """One row per run in `results` order, contract columns first, then `EXTRA_COLUMNS`.

    Speedup is throughput / baseline throughput within each `experiment_id` and backend. The
    baseline is the first finished run with strategy "single"; without one, the first finished run
    on one device of any strategy. Comparing throughput (samples/s) rather than step time makes the
    one formula right for both scalings: under strong scaling the global batch is fixed, so it is
    the step-time ratio; under weak scaling the global batch grows with the devices, so it is the
    scaled speedup and efficiency = speedup / devices equals t(1) / t(n), the usual weak-scaling
    efficiency.
    Runs that did not finish, or have no baseline in their experiment, get NaN speedup and
    efficiency. `projected` comes from the result: True only for rows a cost model projected.
    A run of a searched plan adds the plan's fields and `scaled` after `devices`
    (`plan_columns.with_ran_plans`).
    The frame is a `RunFrame`: a notebook shows its figures, and any selection of them, in
    units people read (analysis/tables/readable_frame.py).
    """
    frame = pd.DataFrame([_row(result) for result in results], columns=list(ALL_COLUMNS))
    frame = frame.astype(
        {
            **dict.fromkeys(_FLOAT_COLUMNS, "float64"),
            **dict.fromkeys(_INT_COLUMNS, "int64"),
            **dict.fromkeys(_OPTIONAL_INT_COLUMNS, "Int64"),
            **dict.fromkeys(_BOOL_COLUMNS, "bool"),
            **dict.fromkeys(_OPTIONAL_BOOL_COLUMNS, "boolean"),
            "target_reached": "boolean",
        }
    )
    # Its values as computed; its display, and that of every selection from it, readable.
    rounds = [_round_tag(result) for result in results]
    frame = with_speedup_intervals(
        _with_speedup(frame, rounds), results, [*_BASELINE_GROUP], _baseline
    )
    return RunFrame(with_ran_plans(_with_time_to_target_speedup(frame), results))


def _row(result: RunResult) -> dict[str, object]:
    result = settle_communication(result)  # runs logged before the rule get it too
    row: dict[str, object] = {
        name: getattr(result, name)
        for name in ALL_COLUMNS
        if name not in _FLOAT_COLUMNS
        and name not in CONVERGENCE_COLUMNS
        and name not in ("projected", "timed_steps", "comm_below_noise", *_TUNED_COLUMNS)
        and name not in INTERVAL_COLUMNS
        and name not in AUTO_COLUMNS
        and name not in PLAN_COLUMNS
        and name not in EXPERT_COLUMNS
        and name not in PREDICTION_COLUMNS
    }
    row.update(plan_cells(result))
    row["micro_batches_auto"] = auto_note(result.extra.get("microbatch_choice") or {})
    row.update(_tuned_cells(result))
    row["timed_steps"] = len(result.step_times_s)
    below = bool(result.extra.get("comm_below_noise"))
    row["comm_below_noise"] = below
    row["comm_noise_s"] = parse_number(shown_noise(result.extra))
    row.update(convergence_cells(result))
    row.update({name: parse_number(getattr(result, name)) for name in _MEASURED_SCALARS})
    row["peak_memory_bytes"] = parse_number(result.max_peak_memory_bytes)
    row["training_time_s"] = _training_time(result)
    row.update({n: parse_number(result.extra.get(n)) for n in (*PIPELINE_COLUMNS, *BAND_COLUMNS)})
    row["state_bytes"] = parse_number(
        max(result.extra.get("state_bytes", {}).values(), default=None)
    )
    held = [s.get("activation_bytes_held") for s in result.extra.get("stages", [])]
    row["peak_activation_bytes"] = parse_number(
        max((h for h in held if h is not None), default=None)
    )
    row.update(fullest_components(result))
    experts = result.extra.get("experts") or {}
    row["experts"] = experts.get("kind", "")
    row.update({n: parse_number(experts.get(n)) for n in EXPERT_COLUMNS[1:]})
    row.update(speedup=math.nan, efficiency=math.nan, projected=bool(result.projected))
    row.update(_predicted_cells(result))
    row.update(interval_cells(result))
    # Not measured is not zero: the step's split into compute and communication is unknown.
    row["compute_time_s"] = step_breakdown(row)[0] if row["comm_measured"] else math.nan
    row["effective_bandwidth_bytes_s"] = effective_bandwidth(row)
    if not result.ok:
        figures = (*FIGURE_COLUMNS, *PIPELINE_COLUMNS, *BAND_COLUMNS, "compute_time_s")
        row.update(
            dict.fromkeys((*figures, "effective_bandwidth_bytes_s", "comm_noise_s"), math.nan)
        )
        row["comm_below_noise"] = False
    return row


def _predicted_cells(result: RunResult) -> dict[str, object]:
    """The calibrated prediction `extra["predicted"]` holds, its ratio to the measured step."""
    predicted = result.extra.get("predicted") or {}
    step = parse_number(predicted.get("step_time_s"))
    measured = parse_number(result.step_time_s)
    ratio = step / measured if measured and result.ok else math.nan
    source = predicted.get("reason") or predicted.get("calibration", "")
    if predicted.get("compute_source"):
        source = f"{source}; compute: {predicted['compute_source']}"
    return {
        "predicted_step_time_s": step,
        "predicted_over_measured": ratio,
        "predicted_off_in": predicted.get("far_off", ""),
        "predicted_from": source,
    }


_TUNED_COLUMNS = (
    "tune",
    "steps_per_execution",
    "steps_per_execution_why",
    "jit_compile",
    "comm_measured",
)


def _tuned_cells(result: RunResult) -> dict[str, object]:
    """What the run trained with, from `extra["tuned"]`; blank for rows logged before tune."""
    tuned = result.extra.get("tuned") or {}
    return {
        "tune": tuned.get("tune", ""),
        "steps_per_execution": tuned.get("steps_per_execution", pd.NA),
        "steps_per_execution_why": (tuned.get("why") or {}).get("steps_per_execution", ""),
        "jit_compile": tuned.get("jit_compile", pd.NA),
        "comm_measured": bool(result.extra.get("comm_measured", True)),
    }


def _training_time(result: RunResult) -> float:
    """The median step times the steps trained; NaN for a projection, which trained nothing."""
    steps = result.epochs * result.steps_per_epoch
    if result.projected or not result.step_time_s or steps <= 0:
        return math.nan
    return result.step_time_s * steps


def _round_tag(result: RunResult) -> tuple[int, int] | None:
    """(round, rounds) of one round's own row in the log; None for a run outside rounds and for
    a row that merged its configuration's rounds."""
    tag = result.extra.get("round")
    return None if tag is None or "round_run_ids" in result.extra else (tag[0], tag[1])


def _with_speedup(frame: pd.DataFrame, rounds: Sequence[tuple[int, int] | None]) -> pd.DataFrame:
    """Speedup against the experiment's baseline; a round's own row (the run log shows every
    round) against its own round's baseline, so drift between rounds stays out of it."""
    speedup = pd.Series(math.nan, index=frame.index, dtype="float64")
    for _, group in frame.groupby(list(_BASELINE_GROUP), sort=False, dropna=False):
        baseline = _baseline_throughput(group)
        if baseline is None:
            continue
        finished = group.index[group["status"] == "ok"]
        own = _round_baselines(group, rounds)
        base = [own.get(index, baseline) for index in finished]
        speedup[finished] = group.loc[finished, "throughput_samples_s"] / base
    frame["speedup"] = speedup
    # A zero device count would give an infinite efficiency; leave it undefined instead.
    frame["efficiency"] = speedup / frame["devices"].where(frame["devices"] > 0)
    return frame


def _with_time_to_target_speedup(frame: pd.DataFrame) -> pd.DataFrame:
    """Baseline time to target / each run's, within each experiment; NaN unless both reached it."""
    speedup = pd.Series(math.nan, index=frame.index, dtype="float64")
    for _, group in frame.groupby(list(_BASELINE_GROUP), sort=False, dropna=False):
        baseline = _baseline(group)
        # NaN when there is no baseline or it never reached the target.
        if baseline is not None and baseline["time_to_target_s"] > 0:
            speedup[group.index] = baseline["time_to_target_s"] / group["time_to_target_s"]
    frame["time_to_target_speedup"] = speedup
    return frame


def _baseline(group: pd.DataFrame) -> pd.Series | None:
    """The row every speedup of an experiment is measured against
    (`analysis.cost_model.speedup_baseline`)."""
    position = baseline_index(_candidates(group))
    return None if position is None else group.iloc[position]


def _candidates(group: pd.DataFrame) -> list[Candidate]:
    return [
        Candidate(row.status, row.strategy, row.devices, row.throughput_samples_s)
        for row in group.itertuples(index=False)
    ]


def _round_baselines(
    group: pd.DataFrame, rounds: Sequence[tuple[int, int] | None]
) -> dict[int, float]:
    """Each round's own row's baseline throughput, by row: among the rows of its round up to it,
    the latest the baseline rule picks (a comparison runs its rounds in turn, so the latest is
    its own comparison's). Rows outside rounds, or whose round has no baseline, are left out."""
    by_round: dict[tuple[int, int], list[int]] = {}
    for index in group.index:
        if rounds[index] is not None:
            by_round.setdefault(rounds[index], []).append(index)
    own = {}
    for indices in by_round.values():
        candidates = _candidates(group.loc[indices])
        for position, index in enumerate(indices):
            picked = baseline_index(candidates[position::-1])  # the latest first
            if picked is not None:
                own[index] = float(candidates[position - picked].throughput_samples_s)
    return own


def _baseline_throughput(group: pd.DataFrame) -> float | None:
    """Throughput of the run that speedup is measured against, or None when there is none."""
    baseline = _baseline(group)
    return None if baseline is None else float(baseline["throughput_samples_s"])


def markdown_table(df: pd.DataFrame, columns: Sequence[str] | None = None) -> str:
    """A GitHub markdown table of `df` for reports: 4 significant digits, bytes shown in MiB.

    `columns` defaults to the contract columns plus `scaling` (those present in `df`), and the
    time-to-target columns when a run has a target or a learning-rate rule.
    """
    default = (*MARKDOWN_COLUMNS, *(_MARKDOWN_CONVERGENCE if has_convergence(df) else ()))
    chosen = [c for c in (columns or default) if c in df.columns]
    shown = mark_below_noise(mark_not_reached(display_frame(df[chosen]), df), df)
    shown = mark_not_measured(shown, df)
    align = ["right" if is_numeric(df, c) else "left" for c in chosen]
    # disable_numparse: the cells are already formatted; tabulate must not re-round them.
    return shown.to_markdown(index=False, disable_numparse=True, colalign=align)
