"""`Plans`: the answer of a plan search, every plan of a model on a cluster, ranked.

Fitting plans come first, fastest first. `table` holds one row per plan; `best`, `top(n)`,
`explain()` and `plot()` read it, and a notebook shows the leading plans.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import pandas as pd

from ..analysis.cost_model.gpu_cluster import GPUCluster
from ..analysis.cost_model.model_card import ModelCard
from ..analysis.cost_model.parallel_plan import Plan
from ..analysis.cost_model.plan_figures import PART_COLUMNS
from ..analysis.cost_model.stage_split import blocks_text
from ..errors import GpkError
from .explanation import AXES, explain, gigabytes, nothing_fits, seconds

PLAN_COLUMNS = tuple(f.name for f in fields(Plan))
TIME_COLUMNS = (
    "step_time_s",
    "throughput_samples_s",
    "step_time_low_s",
    "step_time_high_s",
    "model_tflops_per_device",
    "mfu",
)
MEMORY_COLUMNS = (
    "params_bytes",
    "grads_bytes",
    "optimizer_bytes",
    "activations_bytes",
    "memory_bytes",
    "fits",
)
# The compute part's terms: the largest of the first three, plus attention as written's passes
# over its scores (`parallel_plan_step_time.step_time`).
COMPUTE_COLUMNS = ("flops_s", "memory-bandwidth_s", "launches_s", "attention-scores_s")
COLUMNS = (
    *(*PLAN_COLUMNS, *TIME_COLUMNS, *MEMORY_COLUMNS, "bound"),
    *(*PART_COLUMNS, *COMPUTE_COLUMNS, "bubble_source"),
)
SHOWN = 5  # plans a notebook or a terminal shows
# Columns a notebook's table leaves out where every shown plan has the same value (the
# explanation still names what made the best win; the terminal's text shows them all).
OPTIONAL_SHOWN = ("blocks", "attention", "seq. parallel", "context", "expert", "recompute")


@dataclass(frozen=True)
class RankedPlan(Plan):
    """A `Plan` with its row of the table: `best.step_time_s`, `best.row["memory_bytes"]`."""

    row: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __getattr__(self, name: str) -> Any:
        row = self.__dict__.get("row") or {}
        if name in row:
            return row[name]
        raise AttributeError(f"{type(self).__name__!r} has no attribute {name!r}")


class Plans:
    """Every data × fsdp × tensor × pipeline plan of one model on one cluster, ranked.

    Args:
        rows: the ranked rows (`parallel_plan_ranking.rank`, refined), fitting first, fastest first.
        card: the model's counted figures.
        cluster: the cluster the plans run on.
        global_batch: samples per step.
        room: the bytes of each GPU the plans may fill.
        name: the model's name, for titles.
        note: how the figures were made (the count, the replayed pipelines).
    """

    def __init__(
        self,
        rows: list[dict[str, Any]],
        card: ModelCard,
        cluster: GPUCluster,
        global_batch: int,
        room: float,
        name: str = "the model",
        note: str = "",
    ) -> None:
        self.table = pd.DataFrame(rows, columns=list(COLUMNS))
        self._rows = rows
        self.card, self.cluster, self.global_batch = card, cluster, global_batch
        self.room, self.name, self.note = room, name, note

    @property
    def fitting(self) -> pd.DataFrame:
        """The plans that fit, fastest first."""
        return self.table[self.table["fits"]]

    @property
    def best(self) -> RankedPlan:
        """The fastest plan that fits; GpkError, one sentence, when none does."""
        if not self._rows or not self._rows[0]["fits"]:
            raise GpkError(self._nothing_fits())
        row = self._rows[0]
        return RankedPlan(**{c: row[c] for c in PLAN_COLUMNS}, row=dict(row))

    def layers(self) -> pd.DataFrame:
        """A card of rows' layers: each one's FLOPs, bytes, parameters and kept activations
        per sample (no rows for a Transformer carded by its blocks)."""
        return pd.DataFrame(self.card.layer_table())

    def top(self, n: int = SHOWN) -> pd.DataFrame:
        """The `n` fastest plans that fit (fewer when fewer fit)."""
        return self.fitting.head(n)

    def explain(self) -> str:
        """Why the best plan beats the runners-up, in a few sentences from the table's figures."""
        return explain(self._rows, self.cluster, self.room, self.card)

    def plot(self) -> Any:
        """Step time against memory per GPU for every plan, the usable memory as a line, the
        best marked (`plots/plan_search.py`)."""
        from ..plots.plan_search import plans_figure

        return plans_figure(self.table, self.room, self.title)

    @property
    def title(self) -> str:
        return (
            f"{self.name} on {self.cluster.label}, global batch {self.global_batch}, "
            f"{self.card.precision}"
        )

    def _nothing_fits(self) -> str:
        return nothing_fits(self._rows, self.cluster, self.room)

    def _shown(self, n: int = SHOWN) -> pd.DataFrame:
        """The leading plans as text cells: sizes in GB, times in s or ms."""
        top = self.top(n)
        sizes = zip(top["micro_batch_size"], top["micro_batches"], strict=True)
        shown = top[list(AXES) + ["sharding"]].copy()
        shown["micro-batch"] = [f"{b} × {m}" for b, m in sizes]
        shown["schedule"] = top["schedule"]
        shown["blocks"] = [blocks_text(tuple(b)) if b else "" for b in top["stage_blocks"]]
        shown["attention"] = top["attention"]
        shown["seq. parallel"] = top["sequence_parallel"].map({True: "yes", False: ""})
        shown["context"] = top["context"]
        if self.card.has_experts:
            shown["expert"] = top["expert"]
        shown["recompute"] = top["checkpointing"]
        shown["step"] = top["step_time_s"].map(seconds)
        shown["MFU"] = top["mfu"].map("{:.0%}".format)
        shown["memory/GPU"] = top["memory_bytes"].map(gigabytes)
        shown["bound"] = top["bound"]
        return shown.reset_index(drop=True)

    def _heading(self) -> str:
        fit = int(self.table["fits"].sum())
        return (
            f"Plans for {self.title}: {fit} of {len(self.table)} fit in "
            f"{gigabytes(self.room)} per GPU"
        )

    def text(self, n: int = SHOWN) -> str:
        """The heading, the `n` leading plans and why the best wins, as a terminal shows them."""
        if not self.table["fits"].any():
            return self._heading() + "\n" + self._nothing_fits()
        lines = [self._heading(), self._shown(n).to_string(index=False), self.explain()]
        if self.note:
            lines.append(self.note)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        heading = f"<p><b>{html.escape(self._heading())}</b></p>"
        if not self.table["fits"].any():
            return heading + f"<p>{html.escape(self._nothing_fits())}</p>"
        shown = self._shown()
        # A choice every shown plan makes alike is left out: the table must fit a notebook's
        # output area at 1,280 px. A mixture of experts keeps its expert axis, even at 1 for
        # every plan: that is what its reader looks for.
        kept = {"expert"} if self.card.has_experts else set()
        alike = [
            c for c in OPTIONAL_SHOWN if c in shown and c not in kept and shown[c].nunique() <= 1
        ]
        table = shown.drop(columns=alike).to_html(index=False, border=0)
        words = html.escape(self.explain())
        note = f"<p><small>{html.escape(self.note)}</small></p>" if self.note else ""
        return (
            f'<div style="max-width: 1200px">{heading}{table}'
            f'<p style="max-width: 1100px">{words}</p>{note}</div>'
        )
