"""The micro-batch trade-off of one pipeline run, in two panels side by side.

Left, the curve the run measured: each stage's cost per sample (forward, backward and weight
gradient together) against the micro-batch size, the whole batch at the right end. Right, what
that curve does to the step: the simulated step for every M the schedule allows, beside the
step it would have if a sample cost the same at every size (only the bubble shrinking), with the
M the run used marked. Where the left curve climbs steeply at small sizes, the right one turns
up while the bubble still shrinks: that is why `micro_batches="auto"` stops where it does.
"""

from __future__ import annotations

from typing import Any

from ..runs.results.run_result import RunResult
from .style import DisplayFigure


def microbatch_figure(result: RunResult) -> DisplayFigure:
    """Per-sample cost against micro-batch size, and simulated step time against M."""
    extra = result.extra
    if "microbatch_curve" not in extra:
        raise ValueError(
            f"run {result.run_id} measured no micro-batch curve (only strategy='pipeline' does)"
        )
    curve = _per_sample(extra["microbatch_curve"]["points"])
    choice = extra["microbatch_choice"]
    figure = DisplayFigure(figsize=(11, 3.8), layout="constrained")
    cost, step = figure.subplots(1, 2)
    _draw_curve(cost, curve)
    _draw_steps(step, choice, result)
    kind = "virtual " if result.virtual else ""
    figure.suptitle(
        f"{result.schedule}, {result.devices} {kind}{result.device_kind} devices, "
        f"batch {result.global_batch}: "
        + ("auto chose" if choice["auto"] else "given")
        + f" M={choice['micro_batches']}",
        fontsize=11,
    )
    return figure


def _per_sample(points: list[dict[str, Any]]) -> dict[int, dict[int, float]]:
    """Seconds per sample by stage, then size: every task kind of the stage summed."""
    cost: dict[int, dict[int, float]] = {}
    for p in points:
        by_size = cost.setdefault(p["stage"], {})
        by_size[p["size"]] = by_size.get(p["size"], 0.0) + p["seconds"] / p["size"]
    return cost


def _draw_curve(axis: Any, curve: dict[int, dict[int, float]]) -> None:
    sizes = sorted(next(iter(curve.values())))
    for stage in sorted(curve):
        axis.plot(
            sizes,
            [curve[stage][n] * 1e3 for n in sizes],
            "o-",
            lw=1,
            ms=3,
            label=f"stage {stage}",
        )
    axis.plot(
        sizes,
        [sum(by_size[n] for by_size in curve.values()) * 1e3 for n in sizes],
        "o-",
        color="black",
        lw=2,
        label="all stages",
    )
    axis.set_xscale("log", base=2)
    axis.set_ylim(0, None)
    axis.set_xticks(sizes, [str(n) for n in sizes])
    axis.set_xlabel("micro-batch size (samples)")
    axis.set_ylabel("ms per sample (F + B, each task alone)")
    axis.set_title("Measured: cost per sample", fontsize=10)
    axis.legend(fontsize=7, ncols=2)


def _draw_steps(axis: Any, choice: dict[str, Any], result: RunResult) -> None:
    options = choice["options"]
    ms = [o["micro_batches"] for o in options]
    steps = [o["step_s"] * 1e3 for o in options]
    first = options[0]
    # A sample costing the same at every size: the busy time stays, only the bubble shrinks.
    flat = [first["step_s"] * 1e3 * (1 - first["bubble"]) / (1 - o["bubble"]) for o in options]
    axis.plot(ms, steps, "o-", color="tab:orange", lw=2, label="replayed on the measured curve")
    axis.plot(ms, flat, "--", color="0.5", label="if a sample cost the same at every size")
    used = choice["micro_batches"]
    at = ms.index(used)
    axis.plot([used], [steps[at]], "*", color="tab:red", ms=14, label=f"M={used} (this run)")
    if choice["best"] != used:
        best = ms.index(choice["best"])
        axis.plot([ms[best]], [steps[best]], "*", color="tab:green", ms=12, label="auto's M")
    axis.set_xscale("log", base=2)
    axis.set_xticks(ms, [str(m) for m in ms])
    axis.set_ylim(0, max(max(steps), max(flat)) * 1.15)
    axis.set_xlabel("micro-batches M")
    axis.set_ylabel("step on the curve (ms)")
    axis.set_title(
        f"Step on the curve, {result.schedule} on {result.devices} devices\n"
        "(no optimizer updates, no per-task cost)",
        fontsize=10,
    )
    axis.legend(fontsize=7)
