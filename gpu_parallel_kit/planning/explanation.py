"""Why the best plan wins, in a few sentences read off the ranked rows: what bounds it, what
each runner-up adds and on which link, and, when nothing fits, the smallest shortfall.

Every figure is printed from the row it belongs to with the table's own units (`seconds`,
`gigabytes`), so a sentence and the table never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from ..analysis.cost_model.gpu_cluster import GPUCluster
from ..analysis.cost_model.model_card import AS_WRITTEN, FLASH, ModelCard
from ..analysis.cost_model.parallel_plan import FULL, NONE, Plan
from ..analysis.cost_model.parallel_plan_memory import memory
from ..analysis.cost_model.parallel_plan_step_time import step_time
from ..analysis.cost_model.plan_figures import PART_COLUMNS
from ..analysis.cost_model.stage_split import blocks_text
from ..strategies.plan_axes import DATA, PLAN_AXES, STAGES, TENSOR

Row = Mapping[str, Any]
AXES = (DATA, TENSOR, STAGES)  # as "data × tensor × stages" reads
PLAN_FIELDS = tuple(f.name for f in fields(Plan))
# Two steps closer than this share of the best's tie: the closed form is not finer, and the
# table's three significant figures would show the same time.
TIE = 0.005
_PART_WORDS = {
    "compute": "compute",
    "memory-bandwidth": "memory bandwidth (weights and activations read and written)",
    "launches": "kernel launches (the small kernels' launch floor)",
    "attention-scores": "attention scores' passes through memory (attention as written)",
    "comm:tensor": "tensor all-reduces",
    "comm:context": "context ring's sends not hidden by attention",
    "comm:expert": "experts' all-to-alls",
    "comm:data": "exposed gradient all-reduce",
    "comm:stages": "sends between stages",
    "bubble": "pipeline bubble",
}
_FIELD_WORDS = {
    "micro_batch_size": "micro-batch size",
    "micro_batches": "micro-batches",
    "virtual_stages": "virtual stages",
    "sequence_parallel": "sequence parallel",
}
_AXIS_OF_PART = {f"comm:{axis}": axis for axis in PLAN_AXES}


def seconds(value: float) -> str:
    """A step time as the table's text shows it: "1.23 s", or "850 ms" below a second."""
    return f"{value:.3g} s" if value >= 1 else f"{value * 1e3:.3g} ms"


def gigabytes(value: float) -> str:
    """Bytes as the table's text shows them: "68.5 GB", or "218 MB" below a tenth of a GB."""
    return f"{value / 1e9:.1f} GB" if value >= 1e8 else f"{value / 1e6:.3g} MB"


def plan_text(row: Row) -> str:
    """ "data 2 × tensor 8 × stages 4, micro-batch 1 × 64, 1f1b, blocks 19-20-21-20, sequence
    parallel, checkpointing selective"."""
    text = " × ".join(f"{axis} {row[axis]}" for axis in AXES)
    text += f" × context {row['context']}" if row.get("context", 1) > 1 else ""
    text += f" × expert {row['expert']}" if row.get("expert", 1) > 1 else ""
    text += f", {row['sharding']}" if row["sharding"] != "none" else ""
    text += f", micro-batch {row['micro_batch_size']} × {row['micro_batches']}"
    if row["stages"] > 1:
        chunks = f" ({row['virtual_stages']} chunks)" if row["virtual_stages"] > 1 else ""
        text += f", {row['schedule']}{chunks}"
        if row.get("stage_blocks"):
            text += f", blocks {blocks_text(tuple(row['stage_blocks']))}"
    text += ", sequence parallel" if row.get("sequence_parallel") else ""
    return text + (
        f", checkpointing {row['checkpointing']}" if row["checkpointing"] != "none" else ""
    )


def explain(
    rows: Sequence[Row], cluster: GPUCluster, room: float, card: ModelCard | None = None
) -> str:
    """A few sentences: the best plan and what bounds it, what each of its choices of
    attention, sequence parallelism, recomputation, stages and context gives it (`card`, when
    given, sizes the plan with attention run the other way), then the runner-up and the
    fastest plan of another tensor size, each with what it adds and why; or the nothing-fits
    sentence."""
    fitting = [r for r in rows if r["fits"]]
    if not fitting:
        return nothing_fits(rows, cluster, room)
    best = fitting[0]
    said = [
        f"The best plan, {plan_text(best)}, takes {seconds(best['step_time_s'])} a step "
        f"(MFU {best['mfu']:.0%}), bounded by {_PART_WORDS.get(best['bound'], best['bound'])}, "
        f"and needs {gigabytes(best['memory_bytes'])} of {gigabytes(room)} usable per GPU."
    ]
    said += _what_made_it_win(best, rows, cluster, room, card)
    others = []
    if len(fitting) > 1:
        others.append(("The runner-up", fitting[1]))
    other_tensor = next((r for r in fitting[1:] if r["tensor"] != best["tensor"]), None)
    if other_tensor is not None and other_tensor is not (fitting[1] if len(fitting) > 1 else None):
        others.append((f"The fastest with tensor {other_tensor['tensor']}", other_tensor))
    for label, row in others:
        said.append(_against(label, row, best, cluster))
    said = [sentence for sentence in said if sentence]
    # A plan only as fast as the best, within the closed form's grain, is no faster.
    quicker = best["step_time_s"] * (1 - TIE)
    faster = next((r for r in rows if not r["fits"] and r["step_time_s"] < quicker), None)
    if faster is not None:
        said.append(
            f"A faster plan, {plan_text(faster)}, would take {seconds(faster['step_time_s'])} "
            f"but needs {gigabytes(faster['memory_bytes'])}."
        )
    return " ".join(said)


def _against(label: str, row: Row, best: Row, cluster: GPUCluster) -> str:
    """How `row` differs from `best`, how much longer it takes and which part grows most; for
    a row that ties with `best`, what else tells them apart ("" when nothing does)."""
    changed = [f for f in PLAN_FIELDS if row[f] != best[f]]
    if "stages" in changed:  # the blocks per stage follow the stages
        changed = [f for f in changed if f != "stage_blocks"]
    differs = ", ".join(_field_text(f, row[f]) for f in changed) or "the same shape"
    extra = row["step_time_s"] - best["step_time_s"]
    if extra <= TIE * best["step_time_s"]:
        return _tie(label, differs, row, best)
    growth = {part[: -len("_s")]: row[part] - best[part] for part in PART_COLUMNS}
    part = max(growth, key=growth.get)
    sentence = f"{label} ({differs}) takes {seconds(row['step_time_s'])}, {seconds(extra)} more"
    if growth[part] <= 0:
        return sentence + "."
    sentence += f", with {seconds(growth[part])} more in its {_PART_WORDS[part]}"
    axis = _AXIS_OF_PART.get(part)
    if axis is not None:
        mine, theirs = _link(cluster, row, axis), _link(cluster, best, axis)
        if mine is not None and mine != theirs:
            where = f"on {theirs.name}" if theirs is not None else "not at all"
            sentence += (
                f", as {axis} {row[axis]} crosses {mine.name} "
                f"({mine.bandwidth_bytes_s / 1e9:g} GB/s) where {axis} {best[axis]} runs "
                f"{where}"
            )
    return sentence + "."


def _what_made_it_win(
    best: Row, rows: Sequence[Row], cluster: GPUCluster, room: float, card: ModelCard | None
) -> list[str]:
    """A sentence for each of flash attention, sequence parallelism, selective recomputation,
    uneven stages and a context axis the best plan uses: the same plan without it, and what
    that needs or takes."""
    said = []
    if card is not None and best.get("attention") == FLASH:
        said.append(_flash_sentence(best, cluster, room, card))
    alternatives = (
        ("sequence_parallel", False, "Sequence parallelism (the layer norms and dropouts "
         "split by tensor)"),
        ("checkpointing", NONE, "Selective recomputation (the attention core run again)"),
        ("context", 1, "The context axis (each sample's tokens over a ring)"),
        ("expert", 1, "The expert axis (each device holding its share of every block's "
         "experts)"),
    )  # fmt: skip
    for field, other, words in alternatives:
        if best.get(field, other) in (other, False, NONE, FULL):
            continue
        changed = {field: other}
        if field == "context":
            changed["data"] = best["data"] * best["context"]
        twin = _same_but(rows, best, changed)
        if twin is not None:
            said.append(
                f"{words} saves {gigabytes(twin['memory_bytes'] - best['memory_bytes'])} per "
                f"GPU: without it the plan needs {gigabytes(twin['memory_bytes'])}"
                f"{_fits_or_not(twin['memory_bytes'], room)}."
            )
    blocks = tuple(best.get("stage_blocks") or ())
    if len(set(blocks)) > 1:
        said.append(
            f"Its {best['stages']} stages hold {blocks_text(blocks)} blocks, balanced by counted "
            "time with the embedding on the first and the head on the last: no even split of "
            f"{sum(blocks)} blocks into {best['stages']} stages exists."
            if sum(blocks) % best["stages"]
            else f"Its {best['stages']} stages hold {blocks_text(blocks)} blocks, balanced by "
            "counted time with the embedding on the first and the head on the last."
        )
    return said


def _flash_sentence(best: Row, cluster: GPUCluster, room: float, card: ModelCard) -> str:
    """What the best plan would need and take with its attention as written: more memory (its
    scores kept) and a longer step (their passes through memory). A written twin that fits and
    runs faster would be the better plan, so its time is never offered as a lead."""
    written = Plan(**{**{f: best[f] for f in PLAN_FIELDS}, "attention": AS_WRITTEN})
    need = memory(card, written).total
    took = step_time(card, written, cluster).likely
    extra = took - best["step_time_s"]
    sentence = (
        "Flash attention keeps no attention scores and moves none through memory: run as "
        f"written, the same plan would need {gigabytes(need)} per GPU{_fits_or_not(need, room)}"
    )
    if extra > TIE * best["step_time_s"]:
        return f"{sentence}, and take {seconds(took)}, {seconds(extra)} more."
    return f"{sentence}."


def _same_but(rows: Sequence[Row], best: Row, changed: dict[str, Any]) -> Row | None:
    """The row of `best`'s plan with `changed` fields, if the search has it."""
    keys = [f for f in PLAN_FIELDS if f not in changed and f != "stage_blocks"]
    return next(
        (
            r
            for r in rows
            if all(r[f] == v for f, v in changed.items()) and all(r[f] == best[f] for f in keys)
        ),
        None,
    )


def _fits_or_not(need: float, room: float) -> str:
    return ", which fits" if need <= room else ", more than fits"


def _field_text(field: str, value: Any) -> str:
    if field == "stage_blocks":
        return f"blocks {blocks_text(tuple(value))}" if value else "blocks unsplit"
    return f"{_FIELD_WORDS.get(field, field)} {value}"


def _tie(label: str, differs: str, row: Row, best: Row) -> str:
    """A row as fast as the best within `TIE`: the memory it needs instead, or "" when that is
    the same too."""
    mine, theirs = gigabytes(row["memory_bytes"]), gigabytes(best["memory_bytes"])
    if mine == theirs:
        return ""
    return (
        f"{label} ({differs}) ties with it at {seconds(row['step_time_s'])} (within "
        f"{TIE:.1%}) and needs {mine} per GPU where the best needs {theirs}."
    )


def _link(cluster: GPUCluster, row: Row, axis: str) -> Any:
    replicas = row["data"] * row.get("context", 1)  # the context axis sits inside the data axis
    return cluster.links(data=replicas, tensor=row["tensor"], stages=row["stages"])[axis]


def nothing_fits(rows: Sequence[Row], cluster: GPUCluster, room: float) -> str:
    """One sentence: the cluster, the leanest plan, what it needs of what is usable, the fix."""
    leanest = min(rows, key=lambda r: r["memory_bytes"])
    device = cluster.device
    return (
        f"no plan fits {cluster.nodes} × {cluster.per_node} {device.name} "
        f"{device.memory_bytes / 1e9:g} GB: the leanest, {plan_text(leanest)}, needs "
        f"{gigabytes(leanest['memory_bytes'])} of {gigabytes(room)} usable; add nodes or use "
        "a GPU with more memory"
    )
