"""NeMo's long-sequence table against the kit: plans with a context axis, and without one.

NeMo's table (`published_h100_runs.json`, model "llama2-7b") gives Llama 2 7B in FP8 on H100s
at 4K to 1M tokens, each sequence twice: "With CP", its plan published, and "Without CP", the
most performant plan without a context axis that fit, its plan not published.
`with_context` projects each row of the first kind under its stack (`nemo-24.03`, fitted on
these rows) and under that stack fitted without it, as `efficiency_fit.leave_one_out_by_stack`
does; `without_context` sets each row of the second kind against the kit's fastest plan
without a context axis that fits at its sequence. Both count FLOPs as the table does
(`published_runs.published_flops`: NeMo's llama2 formula). See `docs/published-runs.md`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from ..analysis.cost_model.model_card import FLASH
from ..analysis.cost_model.parallel_plan_ranking import rank
from ..analysis.cost_model.parallel_plan_step_time import step_time
from ..analysis.cost_model.roofline import Efficiency
from . import efficiency_fit, published_runs
from .published_runs import PublishedRun


@dataclass(frozen=True)
class WithContext:
    """A "With CP" row of NeMo's long-sequence table and the kit's projection of its plan.

    Args:
        name: the run's name.
        sequence: tokens a sample.
        plan: the published plan, "t4 c4 d8" (tensor, context, data; "p2" where it ran stages).
        published_tflops: the reported TFLOP/s per GPU.
        kit_tflops: the kit's, under the stack fitted on every row, in the table's counting.
        ratio: `kit_tflops` ÷ `published_tflops`.
        left_out_tflops: the kit's under its stack fitted without this row.
        left_out_ratio: `left_out_tflops` ÷ `published_tflops`.
        memory_gb: the kit's memory on the fullest GPU.
        fits: whether that lies within 90 % of the GPU's memory.
    """

    name: str
    sequence: int
    plan: str
    published_tflops: float
    kit_tflops: float
    ratio: float
    left_out_tflops: float
    left_out_ratio: float
    memory_gb: float
    fits: bool


@dataclass(frozen=True)
class WithoutContext:
    """A "Without CP" row of NeMo's table against the kit's fastest plan without a context
    axis that fits (the row's own plan is not published).

    Args:
        sequence: tokens a sample.
        gpus: the row's GPUs.
        published_tflops: the reported TFLOP/s per GPU without a context axis.
        with_context_tflops: the same sequence's "With CP" figure.
        best: the kit's fastest plan without a context axis that fits, "t8 p4 d32 mb1 zero-1
            selective", or "" where none fits.
        kit_tflops: that plan's TFLOP/s per GPU in the table's counting (0 where none fits).
        ratio: `kit_tflops` ÷ `published_tflops`.
        memory_gb: that plan's memory on the fullest GPU.
    """

    sequence: int
    gpus: int
    published_tflops: float
    with_context_tflops: float
    best: str
    kit_tflops: float
    ratio: float
    memory_gb: float


def plan_text(data: int, tensor: int, stages: int, context: int, extra: str = "") -> str:
    """A plan as the tables name it: "t4 c4 d8", "t1 p2 d4"."""
    said = [f"t{tensor}"] + ([f"p{stages}"] if stages > 1 else [])
    said += [f"c{context}"] if context > 1 else []
    return " ".join([*said, f"d{data}"]) + (f" {extra}" if extra else "")


def _tflops(run: PublishedRun, seconds: float) -> float:
    return published_runs.published_flops(run) / (seconds * run.gpus) / 1e12


@functools.cache
def with_context() -> tuple[WithContext, ...]:
    """Each "With CP" row, under its stack and under its stack fitted without it."""
    held = efficiency_fit.all_runs()
    found = []
    for run in published_runs.long_sequence_runs():
        own = _step(run, efficiency_fit.stacks()[run.stack])
        others = efficiency_fit.stacks(tuple(r for r in held if r is not run))
        left_out = _step(run, others[run.stack])
        memory = published_runs.project(run, best=False)
        kit, alone = _tflops(run, own), _tflops(run, left_out)
        published = published_runs.published_tflops(run)
        found.append(
            WithContext(
                run.name,
                run.sequence,
                plan_text(run.data, run.tensor, run.stages, run.context),
                published,
                kit,
                kit / published,
                alone,
                alone / published,
                memory["memory_gb"],
                memory["fits"],
            )  # fmt: skip
        )
    return tuple(found)


def _step(run: PublishedRun, stack) -> float:
    """The kit's step of the run's plan at the share of peak `stack` gives its shapes."""
    share = stack.matmul_at(run.precision).share(efficiency_fit.point(run).inverse_size)
    card, plan = published_runs.card(run), published_runs.plan(run)
    cluster = published_runs.cluster(run)
    return step_time(card, plan, cluster, Efficiency(share, share, share)).likely


@functools.cache
def without_context() -> tuple[WithoutContext, ...]:
    """Each "Without CP" row against the kit's fastest plan without a context axis that fits,
    on the row's GPUs at its global batch, under the stack fitted on the "With CP" rows."""
    runs = {run.sequence: run for run in published_runs.long_sequence_runs()}
    found = []
    for row in published_runs.long_sequence_rows():
        if row["tp"] is not None:
            continue
        run = replace(runs[row["sequence"]], tflops_per_gpu=row["reported"]["tflops_per_gpu"])
        card, cluster = published_runs.card(run), published_runs.cluster(run)
        ranked = rank(card, cluster, run.global_batch, attention=FLASH)
        best = next((r for r in ranked if r["fits"] and r["context"] == 1), None)
        with_cp = runs[row["sequence"]].tflops_per_gpu or 0.0
        published = row["reported"]["tflops_per_gpu"]
        if best is None:
            found.append(WithoutContext(run.sequence, run.gpus, published, with_cp, "", 0, 0, 0))
            continue
        extra = f"mb{best['micro_batch_size']} {best['sharding']} {best['checkpointing']}"
        if best["stages"] > 1:
            extra += f" {best['schedule']}"
        said = plan_text(best["data"], best["tensor"], best["stages"], 1, extra)
        kit = _tflops(run, best["step_time_s"])
        found.append(
            WithoutContext(
                run.sequence,
                run.gpus,
                published,
                with_cp,
                said,
                kit,
                kit / published,
                best["memory_bytes"] / 1e9,
            )  # fmt: skip
        )
    return tuple(found)
