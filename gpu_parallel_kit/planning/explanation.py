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
from ..analysis.cost_model.parallel_plan import Plan
from ..analysis.cost_model.parallel_plan_step_time import PARTS
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
    "comm:tensor": "tensor all-reduces",
    "comm:data": "exposed gradient all-reduce",
    "comm:stages": "sends between stages",
    "bubble": "pipeline bubble",
}
_FIELD_WORDS = {
    "micro_batch_size": "micro-batch size",
    "micro_batches": "micro-batches",
    "virtual_stages": "virtual stages",
}
_AXIS_OF_PART = {f"comm:{axis}": axis for axis in PLAN_AXES}


def seconds(value: float) -> str:
    """A step time as the table's text shows it: "1.23 s", or "850 ms" below a second."""
    return f"{value:.3g} s" if value >= 1 else f"{value * 1e3:.3g} ms"


def gigabytes(value: float) -> str:
    """Bytes as the table's text shows them: "68.5 GB", or "218 MB" below a tenth of a GB."""
    return f"{value / 1e9:.1f} GB" if value >= 1e8 else f"{value / 1e6:.3g} MB"


def plan_text(row: Row) -> str:
    """ "data 4 × tensor 8 × stages 4, zero-1, micro-batch 1 × 16, 1f1b, checkpointing full"."""
    text = " × ".join(f"{axis} {row[axis]}" for axis in AXES)
    text += f", {row['sharding']}" if row["sharding"] != "none" else ""
    text += f", micro-batch {row['micro_batch_size']} × {row['micro_batches']}"
    if row["stages"] > 1:
        chunks = f" ({row['virtual_stages']} chunks)" if row["virtual_stages"] > 1 else ""
        text += f", {row['schedule']}{chunks}"
    return text + (", checkpointing full" if row["checkpointing"] != "none" else "")


def explain(rows: Sequence[Row], cluster: GPUCluster, room: float) -> str:
    """A few sentences: the best plan and what bounds it, then the runner-up and the fastest
    plan of another tensor size, each with what it adds and why; or the nothing-fits sentence."""
    fitting = [r for r in rows if r["fits"]]
    if not fitting:
        return nothing_fits(rows, cluster, room)
    best = fitting[0]
    said = [
        f"The best plan, {plan_text(best)}, takes {seconds(best['step_time_s'])} a step "
        f"(MFU {best['mfu']:.0%}), bounded by {_PART_WORDS.get(best['bound'], best['bound'])}, "
        f"and needs {gigabytes(best['memory_bytes'])} of {gigabytes(room)} usable per GPU."
    ]
    others = []
    if len(fitting) > 1:
        others.append(("The runner-up", fitting[1]))
    other_tensor = next((r for r in fitting[1:] if r["tensor"] != best["tensor"]), None)
    if other_tensor is not None and other_tensor is not (fitting[1] if len(fitting) > 1 else None):
        others.append((f"The fastest with tensor {other_tensor['tensor']}", other_tensor))
    for label, row in others:
        said.append(_against(label, row, best, cluster))
    said = [sentence for sentence in said if sentence]
    faster = next(
        (r for r in rows if not r["fits"] and r["step_time_s"] < best["step_time_s"]), None
    )
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
    differs = ", ".join(f"{_FIELD_WORDS.get(f, f)} {row[f]}" for f in changed) or "the same shape"
    extra = row["step_time_s"] - best["step_time_s"]
    if extra <= TIE * best["step_time_s"]:
        return _tie(label, differs, row, best)
    growth = {part: row[f"{part}_s"] - best[f"{part}_s"] for part in PARTS}
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
    return cluster.links(data=row["data"], tensor=row["tensor"], stages=row["stages"])[axis]


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
