"""A model's own layers as a plan's card sees them: each layer call's counted work, what it
keeps for the backward, and what the sharding rules split of it over a tensor axis.

A model without the Transformer blocks `model_card.py` reads (an MLP, a CNN, a
keras.applications network) is carded row by row: each layer the count names, its forward
FLOPs scaled so that the rows sum to the step's, its share of the step's bytes and kernels, its
parameters and the activations it keeps (`layer_rows`). Over `tensor` devices a row keeps
1 − f + f/t of its weights, FLOPs and bytes, f the share of its weights the kit's own layout
splits (`sharding/layout.py`: dense and convolution pairs, column then row, attention heads,
an embedding's vocabulary), and adds that layout's all-reduces of its activations
(`LayerSplit`). Runs of rows repeating the same kinds are the model's blocks (`find_blocks`).
Pure: no TensorFlow, no JAX.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import GpkError
from ...sharding.layout import LayerInfo, VariableInfo, derive_layout
from .counted_work import WorkCount
from .roofline import fusion

# The backward of a layer with weights costs about twice its forward (the input's and the
# weights' gradients); the step's own count says the total, the layers' rows its split.
STEP_PER_FORWARD = 3.0


@dataclass(frozen=True)
class LayerRow:
    """One layer of the model as a plan sees it, per sample.

    Args:
        name: the Keras layer's name.
        kind: its class, e.g. "Conv2D".
        flops: forward and backward FLOPs of one sample.
        bytes: the bytes its forward moves for one sample, as counted.
        parameters: its trainable elements.
        kept_bytes: what backpropagation keeps of it for one sample.
        moved_bytes: its share of the bytes one sample's step moves through a GPU's memory
            (the count's, by its share of the FLOPs, at the count's 32-bit width).
        kernels: its share of the step's launching kernels, by its share of the FLOPs.
        info: the layer as the sharding rules read it (None: not read; nothing split).
    """

    name: str
    kind: str
    flops: float
    bytes: float
    parameters: int
    kept_bytes: float
    moved_bytes: float = 0.0
    kernels: float = 0.0
    info: LayerInfo | None = None


@dataclass(frozen=True)
class LayerBlock:
    """A run of layers repeating the same kinds: `repeats` copies of `kinds` from `first`."""

    first: int
    kinds: tuple[str, ...]
    repeats: int


@dataclass(frozen=True)
class LayerSplit:
    """What each row keeps on one of `tensor` devices under the kit's own layout.

    Args:
        tensor: the devices of the tensor axis.
        kept: each row's share of its weights, FLOPs and bytes on one device, 1 − f + f/t.
        messages: each row's all-reduces of activations over the axis, forward and backward,
            each in bytes per sample.
    """

    tensor: int
    kept: tuple[float, ...]
    messages: tuple[tuple[float, ...], ...]

    @property
    def splits(self) -> bool:
        """Whether the layout splits any weight over the axis."""
        return any(share < 1.0 for share in self.kept)


def layer_rows(
    work: WorkCount,
    kept: Mapping[str, float] | None = None,
    activation_width: float = 1.0,
    infos: Sequence[LayerInfo] = (),
) -> tuple[LayerRow, ...]:
    """The rows of a count's layers: their forward FLOPs scaled so that the rows sum to the
    step's FLOPs per sample, and the activations each keeps. Those come from `kept` (bytes by
    layer name, a traced count's residuals) when it names any of the layers, a layer it does
    not name keeping nothing (its output is kept under the next layer's name); else each
    layer's output: half its forward bytes per sample (it reads its input and writes its
    output; its weights are read once a step, not per sample), times `activation_width`, the
    training's activation bytes over the count's (0.5 for 16-bit activations counted at 32
    bits, `roofline.ACTIVATION_WIDTH`). `infos`, the layers as the sharding rules read them,
    are matched to the rows by name."""
    if not work.layers:
        raise GpkError(f"the count from {work.source} names no layer; count it with its layers")
    forward = math.fsum(layer.forward_flops for layer in work.layers)
    scale = work.flops_per_sample / forward if forward > 0 else STEP_PER_FORWARD
    kept = kept or {}
    traced = any(layer.name in kept for layer in work.layers)
    by_name = {info.name: info for info in infos}
    moved = fusion(work) * work.bytes_per_sample
    flops = [layer.forward_flops * scale for layer in work.layers]
    total = math.fsum(flops)
    return tuple(
        LayerRow(
            name=layer.name,
            kind=layer.kind,
            flops=flop,
            bytes=layer.forward_bytes,
            parameters=layer.parameters,
            kept_bytes=float(
                kept.get(layer.name, 0.0) if traced else layer.forward_bytes / 2 * activation_width
            ),
            moved_bytes=moved * flop / total if total > 0 else 0.0,
            kernels=work.kernels * flop / total if total > 0 else 0.0,
            info=by_name.get(layer.name),
        )
        for layer, flop in zip(work.layers, flops, strict=True)
    )


def layer_infos(found: Sequence[Mapping[str, Any]]) -> tuple[LayerInfo, ...]:
    """`LayerInfo`s from a count's plain "layer_infos" (`dataclasses.asdict` of each)."""
    return tuple(
        LayerInfo(
            **{
                **info,
                "variables": tuple(
                    VariableInfo(**{**v, "shape": tuple(v["shape"])}) for v in info["variables"]
                ),
            }
        )
        for info in found
    )


def layer_split(rows: Sequence[LayerRow], tensor: int, width: float) -> LayerSplit:
    """The rows over `tensor` devices under the kit's own layout (`sharding.derive_layout`),
    each all-reduced activation at `width` bytes a value."""
    infos = [row.info for row in rows if row.info is not None]
    layout = derive_layout(infos, tensor)
    sharded: dict[str, float] = {}
    whole: dict[str, float] = {}
    for placement in layout.placements:
        if not placement.trainable:
            continue
        size = float(math.prod(placement.shape))
        whole[placement.layer] = whole.get(placement.layer, 0.0) + size
        if placement.sharded:
            sharded[placement.layer] = sharded.get(placement.layer, 0.0) + size
    messages: dict[str, tuple[float, ...]] = {}
    for collective in layout.collectives:
        bytes_ = collective.elements_per_sample * width
        messages[collective.layer] = (*messages.get(collective.layer, ()), bytes_)
    kept = []
    for row in rows:
        share = sharded.get(row.name, 0.0) / whole[row.name] if whole.get(row.name) else 0.0
        kept.append(1.0 - share + share / tensor)
    return LayerSplit(tensor, tuple(kept), tuple(messages.get(row.name, ()) for row in rows))


def find_blocks(kinds: tuple[str, ...], longest: int = 16) -> tuple[LayerBlock, ...]:
    """Runs of two or more consecutive copies of one pattern of kinds, left to right, each the
    pattern that covers the most layers where it starts (a longer one first on a tie)."""
    found: list[LayerBlock] = []
    start = 0
    while start < len(kinds):
        best: LayerBlock | None = None
        for size in range(1, min(longest, (len(kinds) - start) // 2) + 1):
            pattern = kinds[start : start + size]
            repeats = 1
            while kinds[start + repeats * size : start + (repeats + 1) * size] == pattern:
                repeats += 1
            if repeats > 1 and (best is None or repeats * size >= best.repeats * len(best.kinds)):
                best = LayerBlock(start, pattern, repeats)
        if best is None:
            start += 1
            continue
        found.append(best)
        start += best.repeats * len(best.kinds)
    return tuple(found)
