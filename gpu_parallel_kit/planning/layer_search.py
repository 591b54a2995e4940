"""`exp.search` for a model without Transformer blocks (an MLP, a CNN, a keras.applications
model): its card made of its own layers, every data × ZeRO × fsdp × pipeline plan of it ranked.

The layers come from the experiment's own count, the one its projections use (each layer's
forward FLOPs, bytes and parameters, `analysis/cost_model/counted_work.py`); the card and the
ranking are `analysis/cost_model/layer_card.py`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..analysis.cost_model.counted_work import from_counts
from ..analysis.cost_model.gpu_cluster import GPUCluster
from ..analysis.cost_model.layer_card import LayerCard, layer_rows, rank_layers
from ..analysis.cost_model.roofline import ACTIVATION_WIDTH
from ..analysis.cost_model.training_precision import state_bytes, training_precision
from ..errors import GpkError, whole_number

PLAN = ("data", "stages", "sharding", "micro_batch_size", "micro_batches", "schedule")


@dataclass(frozen=True)
class LayerPlans:
    """Every plan of a layer card on a cluster, ranked: those that fit first, fastest first.

    Args:
        card: the model's layers, counted (`layers()` shows them).
        rows: the ranked rows (`layer_card.rank_layers`).
        cluster: the GPUs the plans use.
        global_batch: samples per step.
        note: how the figures were made.
    """

    card: LayerCard
    rows: tuple[dict[str, Any], ...]
    cluster: GPUCluster
    global_batch: int
    note: str = ""

    def __repr__(self) -> str:
        fits = sum(1 for row in self.rows if row["fits"])
        head = (
            f"<LayerPlans {self.card.name}: {len(self.rows)} plans on {self.cluster.gpus} "
            f"{self.cluster.device.name}, {fits} fit"
        )
        if not fits:
            return head + ">"
        best = self.rows[0]
        return (
            f"{head}; best {_plan_text(best)}: {best['step_time_s'] * 1e3:.4g} ms a step, "
            f"{best['throughput_samples_s']:,.0f} samples/s, {best['bound']}-bound>"
        )

    @property
    def table(self) -> pd.DataFrame:
        """Every plan as a row, ranked."""
        return pd.DataFrame(list(self.rows))

    @property
    def best(self) -> dict[str, Any]:
        """The fastest plan that fits; GpkError, one sentence, when none does."""
        if not self.rows or not self.rows[0]["fits"]:
            smallest = min(row["memory_bytes"] for row in self.rows)
            raise GpkError(
                f"no plan of {self.card.name} fits {self.cluster.device.name}'s memory; the "
                f"leanest needs {smallest / 1e9:.3g} GB a GPU"
            )
        return dict(self.rows[0])

    def explain(self) -> str:
        """Why the best plan wins, in a few sentences: its step, what bounds it and its memory,
        then the fastest plan of each other kind (sharding, pipeline) and what it adds."""
        best = self.best
        room = self.cluster.device.memory_bytes
        said = [
            f"The best plan of {self.card.name}, {_plan_text(best)}, takes "
            f"{_seconds(best['step_time_s'])} a step ({best['throughput_samples_s']:,.0f} "
            f"samples/s), bounded by {best['bound'].replace('-', ' ')}, and needs "
            f"{_bytes(best['memory_bytes'])} of {_bytes(room)} per GPU."
        ]
        kinds = (
            ("Sharding every state (fsdp)", lambda r: r["stages"] == 1 and r["sharding"] == "fsdp"),
            ("The fastest pipeline", lambda r: r["stages"] > 1),
        )
        for name, chosen in kinds:
            other = next((r for r in self.rows if r["fits"] and chosen(r) and r != best), None)
            if other is None:
                continue
            parts = ("comm:data_s", "comm:stages_s", "bubble_s", "compute_s")
            part = max(parts, key=lambda p: other[p] - best[p])
            said.append(
                f"{name}, {_plan_text(other)}, takes "
                f"{_seconds(other['step_time_s'] - best['step_time_s'])} more: its "
                f"{part[:-2]} adds {_seconds(other[part] - best[part])}."
            )
        return " ".join(said)

    def top(self, n: int = 5) -> pd.DataFrame:
        """The `n` leading plans."""
        return self.table.head(n)

    def layers(self) -> pd.DataFrame:
        """The card: each layer's FLOPs, bytes, parameters and kept activations per sample."""
        return pd.DataFrame(self.card.table())


def layer_search(
    experiment: Any,
    gpus: GPUCluster,
    global_batch: int,
    precision: str = "bf16",
    optimizer: str = "adam",
    reserve: float = 0.1,
    kept: dict[str, float] | None = None,
) -> LayerPlans:
    """Rank every plan of the experiment's model, counted layer by layer, on `gpus`.

    Args:
        experiment: an `Experiment`; its step is counted once (`counted_step`) and kept.
        gpus: the cluster (`gpk.GPUCluster`).
        global_batch: samples per step, over the whole cluster.
        precision: the training precision on the GPUs.
        optimizer: the optimizer whose state the memory counts.
        reserve: the share of each GPU's memory kept free for the framework.
        kept: what backpropagation keeps of each layer per sample at `precision`, by layer
            name (the plan count's residuals); None: estimated from the layers' bytes.
    """
    if not isinstance(gpus, GPUCluster):
        raise GpkError(f"gpus={gpus!r} is not a cluster; give gpk.GPUCluster('a100', nodes=1)")
    whole_number(global_batch, "global_batch")
    record = training_precision(precision)
    state_bytes(optimizer, precision)
    counted = experiment.counted_step(experiment.experiment_id)
    if isinstance(counted, str):
        raise GpkError(f"{experiment.model.name}'s step could not be counted: {counted}")
    work = from_counts(counted)
    name = experiment.model.name
    width = ACTIVATION_WIDTH[record.peak]  # the count keeps 32-bit activations
    rows = layer_rows(work, kept, activation_width=width)
    card = LayerCard(name, rows, work, record.name, optimizer)
    rows = rank_layers(card, gpus, global_batch, reserve=reserve)
    blocks = card.blocks()
    repeated = f", {len(blocks)} runs of repeated layers" if blocks else ""
    note = (
        f"{name}: {card.parameters:,} parameters in {len(card.rows)} layers{repeated}, its "
        f"step counted layer by layer ({work.source}); no Transformer blocks, so no tensor plans"
    )
    return LayerPlans(card, tuple(rows), gpus, global_batch, note)


def _plan_text(row: dict[str, Any]) -> str:
    stages = f" × stages {row['stages']}" if row["stages"] > 1 else ""
    return (
        f"data {row['data']}{stages}, {row['sharding']}, micro-batch {row['micro_batch_size']} "
        f"× {row['micro_batches']}"
    )


def _seconds(value: float) -> str:
    return f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s"


def _bytes(value: float) -> str:
    return f"{value / 1e9:.3g} GB" if value >= 1e9 else f"{value / 1e6:.3g} MB"
