"""The pipeline of the leading plans replayed: their bubble and sends simulated task by task
(`pipeline_replay.py`) rather than taken from the schedule's closed form.

Only the leading fitting pipelined plans are replayed, and only those of at most
`MOST_FORWARDS` forward tasks (replaying every plan would take seconds); each row says which
its bubble is in `bubble_source`. Each stage's tasks take its own counted time
(`parallel_plan_step_time.stage_flops`), so uneven stages are replayed as they are.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ...pipeline.schedules import build_schedule
from .model_card import ModelCard
from .parallel_plan import Plan
from .parallel_plan_step_time import stage_flops
from .pipeline_replay import PipelineTasks, replay, stage_work
from .plan_figures import bound
from .stage_split import cut_bytes, plan_split

REFINED = 10  # the leading fitting pipelined plans replayed
# A replay costs about 15 µs a task on one core; a pipeline of more (stage, micro-batch, chunk)
# forwards than this keeps its closed form, which a long pipeline's replay matches closely.
MOST_FORWARDS = 1024
CLOSED_FORM, SIMULATED = "closed form", "simulated"


def refine(rows: list[dict[str, Any]], card: ModelCard, links: Any, top: int = REFINED) -> int:
    """Replay the pipelines of the first `top` fitting rows with more than one stage (of at
    most `MOST_FORWARDS` forwards), in place, and sort the rows again;
    returns how many were replayed. `links(row)` is the link a row's stages send over (None for
    one stage). Every row gets `bubble_source`."""
    for row in rows:
        row["bubble_source"] = CLOSED_FORM
    pipelined = [
        row
        for row in rows
        if row["fits"]
        and row["stages"] > 1
        and row["stages"] * row["micro_batches"] * row["virtual_stages"] <= MOST_FORWARDS
    ]
    for row in pipelined[:top]:
        _replay(row, card, links(row))
    replayed = len(pipelined[:top])
    rows.sort(key=lambda r: (not r["fits"], r["step_time_s"]))
    return replayed


def _replay(row: dict[str, Any], card: ModelCard, link: Any) -> None:
    stages, micro, chunks = row["stages"], row["micro_batches"], row["virtual_stages"]
    schedule = build_schedule(row["schedule"], stages, micro, chunks)
    # The busiest device's work in the whole step; each other stage's in proportion to its FLOPs.
    busy = row["compute_s"] + row["comm:tensor_s"] + row["comm:context_s"] + row["comm:expert_s"]
    plan = Plan(**{f.name: row[f.name] for f in fields(Plan)})
    split = plan_split(card, plan)
    loads = stage_flops(card, plan, split)
    # Chunk-stage c runs on device c mod K: a forward of one chunk and micro-batch there.
    per_task = [
        busy * loads[c % stages] / max(loads.values()) / (micro * chunks * 3.0)
        for c in range(stages * chunks)
    ]
    chunk_stages = stages * chunks
    # A backward is two forwards' work.
    work = stage_work(schedule, per_task, [2.0 * seconds for seconds in per_task])
    message = cut_bytes(card, plan, split) * row["micro_batch_size"] / row["context"]
    send = link.send_s(message) if link is not None else 0.0
    sends = [send] * (chunk_stages - 1)
    span = replay(PipelineTasks(schedule, work, sends), overlap=True).step_s
    closed = busy + row["bubble_s"] + row["comm:stages_s"]
    scale = span / closed if closed > 0 else 1.0
    before = row["step_time_s"]
    exposed = row["comm:data_s"]
    for column in ("step_time_s", "step_time_low_s", "step_time_high_s"):
        row[column] = (row[column] - exposed) * scale + exposed
    # The sends the replay waited for are in its span: what is not work there is bubble.
    row["bubble_s"] = span - busy
    row["comm:stages_s"] = 0.0
    row["model_tflops_per_device"] *= before / row["step_time_s"]
    row["mfu"] *= before / row["step_time_s"]
    row["bound"] = bound(row)
    row["bubble_source"] = SIMULATED
