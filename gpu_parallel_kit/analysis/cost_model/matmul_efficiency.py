"""The share of a GPU's peak a Transformer's matmuls reach, from their shapes on one device.

A matmul of M × K by K × N runs at a share of the peak that falls as any of its three sides
shrinks (partial tiles at the edges, short loops over K, too few tiles to fill the GPU)::

    share(M, N, K) = peak_share / (1 + edge · (1/M + 1/N + 1/K))

A block's matmuls on one of `tensor` devices are its four dense ones (M = micro-batch ×
sequence, the column-parallel QKV and first MLP matmul split N by t, the row-parallel
projections split K by t), the attention core's two (s × s by the head size d) and, once a
micro-batch, the language-model head (the vocabulary split by t). Their FLOP-weighted harmonic
mean is the step's share::

    1 / share = 1 / peak_share + (edge / peak_share) · H,    H = Σ wᵢ (1/Mᵢ + 1/Nᵢ + 1/Kᵢ)

a line in H, so the two parameters are fitted in closed form (`fit`) on the published runs'
implied shares (`planning/efficiency_fit.py`). The band is the fit's residuals: the smallest and
largest ratio of a run's implied share to the fitted one. Parameters, fit and leave-one-out
error: docs/published-runs.md.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import GpkError
from .roofline import DEFAULT_EFFICIENCY, Efficiency

if TYPE_CHECKING:
    from .model_card import ModelCard
    from .parallel_plan import Plan


@dataclass(frozen=True)
class Matmul:
    """One matmul on one device: its sides and its forward FLOPs per micro-batch.

    Args:
        rows: M, the rows of the left operand (tokens of the micro-batch, or of a sequence).
        columns: N, the columns of the result.
        depth: K, the side summed over.
        flops: its forward FLOPs per micro-batch on the device, all its copies together.
    """

    rows: int
    columns: int
    depth: int
    flops: float

    @property
    def inverse_size(self) -> float:
        """1/M + 1/N + 1/K: the shape's part of the fitted share."""
        return 1 / self.rows + 1 / self.columns + 1 / self.depth


@dataclass(frozen=True)
class Measured:
    """One observed step: its matmuls' weighted inverse size and the share of peak it reached.

    Args:
        name: the run it comes from.
        inverse_size: H, the FLOP-weighted 1/M + 1/N + 1/K of its matmuls (`inverse_size`).
        share: the share of peak that reproduces its published step time.
    """

    name: str
    inverse_size: float
    share: float


@dataclass(frozen=True)
class MatmulEfficiency:
    """The share of peak a plan's matmuls reach, from their shapes on one device, with a band.

    `for_plan` gives the `Efficiency` one plan's step is timed at: its likely end the shapes'
    share, its low and high ends that share times the fit's smallest and largest residual.

    Args:
        peak_share: the share of peak of a matmul with unbounded sides.
        edge: in elements: a matmul with one side this long (the others unbounded) reaches
            half of `peak_share`.
        low: the smallest ratio of a fitted run's share to the fit's (the band's low end).
        high: the largest such ratio (the band's high end).
        source: what it was fitted on.
    """

    peak_share: float
    edge: float
    low: float = 1.0
    high: float = 1.0
    source: str = "given"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.peak_share) and 0 < self.peak_share <= 1):
            raise GpkError(f"peak_share={self.peak_share} must lie in (0, 1]; e.g. 0.7")
        if not (math.isfinite(self.edge) and self.edge >= 0):
            raise GpkError(f"edge={self.edge} must be 0 or more elements; e.g. 200")
        if not 0 < self.low <= 1 <= self.high:
            raise GpkError(
                f"the band's ends ({self.low}, {self.high}) must bracket 1; e.g. (0.8, 1.2)"
            )

    def __repr__(self) -> str:
        return (
            f"<MatmulEfficiency {self.peak_share:.3g} / (1 + {self.edge:.4g}·H), "
            f"band ×{self.low:.2f}–×{self.high:.2f} ({self.source})>"
        )

    def share(self, inverse_size: float) -> float:
        """The share of peak of matmuls whose weighted 1/M + 1/N + 1/K is `inverse_size`."""
        return self.peak_share / (1 + self.edge * inverse_size)

    def band(self, inverse_size: float) -> Efficiency:
        """The `Efficiency` of matmuls whose weighted inverse size is `inverse_size`."""
        likely = self.share(inverse_size)
        return Efficiency(
            likely * self.low,
            likely,
            min(1.0, likely * self.high),
            f"matmul shapes: {self!r}",
        )

    def for_plan(self, card: ModelCard, plan: Plan) -> Efficiency:
        """The `Efficiency` a plan's step is timed at: its blocks' matmuls on one device; the
        projection's band (`roofline.DEFAULT_EFFICIENCY`) for a card of rows, whose layers'
        shapes the fit, made on Transformer blocks, does not know."""
        if card.rows:
            return DEFAULT_EFFICIENCY
        return _plan_band(
            self, card_inverse_size(card, plan.tensor, plan.micro_batch_size, plan.expert)
        )


@functools.lru_cache(maxsize=4096)
def _plan_band(efficiency: MatmulEfficiency, inverse_size: float) -> Efficiency:
    return efficiency.band(inverse_size)


# Fitted on the 22 published runs of docs/published-runs.md (A100 80 GB, bf16/fp16) by
# `planning/efficiency_fit.fitted`; tests/planning/test_efficiency_fit.py re-fits and checks them.
FITTED = MatmulEfficiency(
    peak_share=0.6683,
    edge=71.56,
    low=0.790,
    high=1.202,
    source="fitted on 22 published A100 runs (docs/published-runs.md)",
)


def transformer_matmuls(
    hidden: int,
    heads: int,
    sequence: int,
    vocabulary: int,
    tensor: int,
    micro_batch_size: int,
    layers: int = 1,
    mlp: bool = True,
) -> tuple[Matmul, ...]:
    """One block's matmuls on one of `tensor` devices, and the head's, for one micro-batch.

    Megatron-LM's split: the QKV and first MLP matmuls split their columns by t, the attention
    projection and second MLP matmul their depth, the attention core its heads, the head its
    vocabulary. The head's FLOPs are one block's share of it, over `layers` blocks (the head
    runs once per micro-batch, not per block). Without `mlp`, the block's MLP is left out (a
    mixture of experts': `expert_matmuls`).
    """
    tokens = micro_batch_size * sequence
    h, t, s = hidden, tensor, sequence
    size = max(1, hidden // heads)
    dense = (
        Matmul(tokens, max(1, 3 * h // t), h, 2.0 * tokens * h * 3 * h / t),
        Matmul(tokens, h, max(1, h // t), 2.0 * tokens * h * h / t),
    )
    if mlp:
        dense += (
            Matmul(tokens, max(1, 4 * h // t), h, 2.0 * tokens * h * 4 * h / t),
            Matmul(tokens, h, max(1, 4 * h // t), 2.0 * tokens * 4 * h * h / t),
        )
    # QKᵀ and the scores times V, one pair per head and sample on the device
    core = 2.0 * micro_batch_size * heads / t * s * s * size
    attention = (Matmul(s, s, size, core), Matmul(s, size, s, core))
    head = 2.0 * tokens * h * vocabulary / t / layers
    return dense + attention + (Matmul(tokens, max(1, vocabulary // t), h, head),)


def inverse_size(matmuls: Sequence[Matmul]) -> float:
    """H: the matmuls' 1/M + 1/N + 1/K weighted by their FLOPs."""
    weights = [m.flops for m in matmuls]
    total = math.fsum(weights)
    if not total > 0:
        raise GpkError("the matmuls have no FLOPs to weigh their shapes by")
    return math.fsum(w * m.inverse_size for w, m in zip(weights, matmuls, strict=True)) / total


def card_inverse_size(
    card: ModelCard, tensor: int, micro_batch_size: int, expert: int = 1
) -> float:
    """H of a Transformer card's plan on one device (`transformer_matmuls`), its vocabulary read
    off the card's parameters (a GPT's L·(12h² + 13h) + (V + s)·h); a mixture of experts' with
    its experts' matmuls in place of the MLP's (`expert_matmuls`), under an expert axis of
    `expert`."""
    if card.has_experts:
        width = round(card.block_expert_parameters / (3 * card.experts * card.hidden))
        return _mixture_inverse_size(
            card.hidden, card.heads, card.sequence, card.vocabulary, card.layers, width,
            card.experts, card.top_k, tensor, micro_batch_size, expert,
        )  # fmt: skip
    return _transformer_inverse_size(
        card.hidden, card.heads, card.sequence, card.layers, card.parameters, tensor,
        micro_batch_size,
    )  # fmt: skip


@functools.lru_cache(maxsize=4096)
def _mixture_inverse_size(
    hidden: int,
    heads: int,
    sequence: int,
    vocabulary: int,
    layers: int,
    width: int,
    experts: int,
    top_k: int,
    tensor: int,
    micro_batch_size: int,
    expert: int,
) -> float:
    """H of a mixture of experts' plan: its attention and head (`transformer_matmuls` without
    the MLP) and its experts' matmuls (`expert_matmuls`); kept, as a search asks it per plan."""
    return inverse_size(
        transformer_matmuls(
            hidden, heads, sequence, vocabulary, tensor, micro_batch_size, layers, mlp=False
        )
        + expert_matmuls(
            hidden, width, experts, top_k, sequence * micro_batch_size, tensor, expert
        )
    )  # fmt: skip


def expert_matmuls(
    hidden: int, width: int, experts: int, top_k: int, tokens: int, tensor: int, expert: int
) -> tuple[Matmul, ...]:
    """A block's routed experts' matmuls on one device, for one micro-batch of `tokens`: each
    expert's gated MLP (gate and up as one h × 2f, then f × h, f = `width` split by the tensor
    axis) over its even share of the tokens the `expert` replicas route to it. Their FLOPs are
    the device's: its tokens' top-k experts' (every MoE the kit counts is gated: 3·h·f
    weights an expert)."""
    rows = max(1, tokens * expert * top_k // experts)
    f = max(1, width // tensor)
    routed = 2.0 * tokens * top_k * hidden * width / tensor
    return (
        Matmul(rows, max(1, 2 * width // tensor), hidden, 2 * routed),
        Matmul(rows, hidden, f, routed),
    )


@functools.lru_cache(maxsize=4096)
def _transformer_inverse_size(
    hidden: int, heads: int, sequence: int, layers: int, parameters: float, tensor: int,
    micro_batch_size: int,
) -> float:  # fmt: skip
    blocks = layers * (12 * hidden * hidden + 13 * hidden)
    vocabulary = max(1, round((parameters - blocks) / hidden) - sequence)
    return inverse_size(
        transformer_matmuls(hidden, heads, sequence, vocabulary, tensor, micro_batch_size, layers)
    )


def fit(points: Sequence[Measured], source: str = "fitted") -> MatmulEfficiency:
    """The `MatmulEfficiency` whose line 1/share = a + b·H fits `points` by least squares, its
    band the smallest and largest ratio of a point's share to the fitted one."""
    if len(points) < 2 or len({p.inverse_size for p in points}) < 2:
        raise GpkError(f"a fit needs two points of different shapes, not {len(points)}")
    xs = [p.inverse_size for p in points]
    ys = [1 / p.share for p in points]
    x_mean, y_mean = math.fsum(xs) / len(xs), math.fsum(ys) / len(ys)
    slope = math.fsum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys, strict=True)) / math.fsum(
        (x - x_mean) ** 2 for x in xs
    )
    intercept = y_mean - slope * x_mean
    if not intercept > 0:
        raise GpkError(f"the points give no share of peak for large matmuls (1/{intercept:.3g})")
    peak_share = min(1.0, 1 / intercept)
    edge = max(0.0, slope * peak_share)
    shape_only = MatmulEfficiency(peak_share, edge, source=source)
    ratios = [p.share / shape_only.share(p.inverse_size) for p in points]
    return MatmulEfficiency(peak_share, edge, min(1.0, *ratios), max(1.0, *ratios), source)
