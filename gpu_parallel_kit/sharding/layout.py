"""The kit's own tensor-parallel layout, derived from a model's layers (the Megatron-LM pattern).

- A pair of dense layers, the second consuming the first (through element-wise and per-channel
  layers only), is split column-then-row: the first kernel's output features over the model
  axis, the second kernel's input features. Each device computes its slice of the hidden
  activations without talking to the others; one all-reduce sums the second layer's partial
  outputs. A pair of convolutions is split alike on its channels (the first kernel's output
  channels, the second's input channels), pooling and batch normalization passing each channel
  through on its own.
- Attention splits its heads: query, key and value kernels (and biases) on the heads axis, the
  output projection on its heads axis; again one all-reduce after the output projection.
- An embedding table splits its vocabulary (each device looks up the ids it holds), else its
  feature axis.
- A Transformer block that is one layer (keras-hub's) is split inside alike (`blocks.py`).
- Everything else is replicated, and so is any dimension the model axis does not divide.

GSPMD inserts whatever collectives a layout needs, so any layout trains correctly; this one is
chosen to need few. Layers arrive as `LayerInfo` read off the model in the worker.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from .blocks import split_block

Axes = tuple[str | None, ...]
MODEL = "model"
DENSE_KINDS = ("dense", "einsum_dense")
CONVOLUTION_KINDS = ("convolution",)
# Layers that act on each feature alone: a column-split activation passes through them intact.
ELEMENTWISE_KINDS = ("elementwise",)
# Layers that act on each channel alone (pooling, batch normalization): a channel-split
# activation passes through them too, their own per-channel weights kept whole.
PER_CHANNEL_KINDS = ("per_channel",)


@dataclass(frozen=True)
class VariableInfo:
    path: str  # Keras's variable path, e.g. "dense/kernel"
    shape: tuple[int, ...]
    role: str  # kernel | bias | embeddings | query/kernel | ... | other
    trainable: bool = True
    itemsize: int = 4


@dataclass(frozen=True)
class LayerInfo:
    """What the layout rules read of one layer, in the model's call order."""

    name: str
    kind: str  # dense | einsum_dense | convolution | attention | embedding | elementwise
    # | per_channel | other
    variables: tuple[VariableInfo, ...] = ()
    heads: int | None = None  # attention only
    in_elements: int | None = None  # per sample, as measured on one sample
    out_elements: int | None = None


@dataclass(frozen=True)
class Placement:
    """One weight's place in the layout: its axes and why."""

    layer: str
    path: str
    shape: tuple[int, ...]
    axes: Axes
    role: str  # column | row | heads | vocabulary | features | replicated | user | own
    trainable: bool = True
    itemsize: int = 4

    @property
    def sharded(self) -> bool:
        return MODEL in self.axes

    def bytes_per_device(self, model: int) -> int:
        total = self.itemsize
        for size in self.shape:
            total *= size
        return total // model if self.sharded else total


@dataclass(frozen=True)
class Collective:
    """An all-reduce of activations over the model axis, once per step in the given pass."""

    layer: str
    direction: str  # forward | backward
    elements_per_sample: int
    why: str


@dataclass
class Layout:
    """Every weight's placement, and the activation collectives the layout implies."""

    model: int
    placements: list[Placement] = field(default_factory=list)
    collectives: list[Collective] = field(default_factory=list)

    def axes_by_path(self) -> dict[str, Axes]:
        return {p.path: p.axes for p in self.placements}

    @property
    def sharded(self) -> list[Placement]:
        return [p for p in self.placements if p.sharded]


def derive_layout(
    layers: Sequence[LayerInfo],
    model: int,
    user: Sequence[tuple[str, Axes]] = (),
    source: str = "user",
) -> Layout:
    """The layout for `model` devices on the model axis; `user` (pattern, axes) pairs win, each
    weight they place taking `source` as its role ("user", or "own": the model's own layout).

    >>> a = LayerInfo("d1", "dense", (VariableInfo("d1/kernel", (8, 16), "kernel"),))
    >>> b = LayerInfo("d2", "dense", (VariableInfo("d2/kernel", (16, 4), "kernel"),))
    >>> derive_layout([a, b], 2).axes_by_path()
    {'d1/kernel': (None, 'model'), 'd2/kernel': ('model', None)}
    """
    layout = Layout(model)
    roles: dict[str, tuple[Axes, str]] = {}
    _split_dense_pairs(layers, model, roles, layout)
    for layer in layers:
        if layer.kind == "attention":
            _split_heads(layer, model, roles, layout)
        elif layer.kind == "embedding":
            _split_embedding(layer, model, roles, layout)
        elif layer.kind == "other":  # a Transformer block as one layer (keras-hub's)
            split_block(layer, model, roles, layout, Collective)
    for layer in layers:
        for variable in layer.variables:
            axes, role = roles.get(variable.path, ((None,) * len(variable.shape), "replicated"))
            for pattern, wanted in user:
                if re.fullmatch(pattern, variable.path):  # as Keras matches LayoutMap keys
                    axes, role = _fit(tuple(wanted), variable.shape), source
                    break
            layout.placements.append(
                Placement(
                    layer.name,
                    variable.path,
                    variable.shape,
                    axes,
                    role,
                    variable.trainable,
                    variable.itemsize,
                )
            )
    return layout


def _fit(axes: Axes, shape: tuple[int, ...]) -> Axes:
    """The user's axes, padded or cut to the variable's rank (a bias takes a kernel's pattern)."""
    return (tuple(axes) + (None,) * len(shape))[: len(shape)]


def _split_dense_pairs(
    layers: Sequence[LayerInfo],
    model: int,
    roles: dict[str, tuple[Axes, str]],
    layout: Layout,
) -> None:
    """Column-then-row pairs: consecutive dense layers (or convolutions) whose features chain,
    element-wise and per-channel layers allowed between them, each layer in one pair at most."""
    pending: LayerInfo | None = None
    for layer in layers:
        if layer.kind in PER_CHANNEL_KINDS or (
            layer.kind in ELEMENTWISE_KINDS and not layer.variables
        ):
            continue
        kernel = _pairable_kernel(layer)
        if kernel is None:
            pending = None
            continue
        first = _pairable_kernel(pending) if pending is not None else None
        if (
            pending is not None
            and first is not None
            and len(first.shape) == len(kernel.shape)
            and first.shape[-1] == kernel.shape[-2]
            and first.shape[-1] % model == 0
        ):
            rank = len(kernel.shape)
            roles[first.path] = ((None,) * (rank - 1) + (MODEL,), "column")
            bias = _variable(pending, "bias")
            if bias is not None:
                roles[bias.path] = ((MODEL,), "column")
            roles[kernel.path] = ((None,) * (rank - 2) + (MODEL, None), "row")
            if model > 1:
                layout.collectives.append(
                    Collective(layer.name, "forward", layer.out_elements or 0, "row-split sum")
                )
                layout.collectives.append(
                    Collective(
                        pending.name, "backward", pending.in_elements or 0, "input gradient sum"
                    )
                )
            pending = None
        else:
            pending = layer


def _pairable_kernel(layer: LayerInfo) -> VariableInfo | None:
    """The kernel a column-then-row pair splits: a dense layer's 2-D (in, out), or a
    convolution's (…, in, out); None for another layer."""
    kernel = _variable(layer, "kernel")
    if kernel is None:
        return None
    if layer.kind in DENSE_KINDS and len(kernel.shape) == 2:
        return kernel
    if layer.kind in CONVOLUTION_KINDS and len(kernel.shape) >= 3:
        return kernel
    return None


def _split_heads(
    layer: LayerInfo, model: int, roles: dict[str, tuple[Axes, str]], layout: Layout
) -> None:
    if not layer.heads or layer.heads % model:
        return
    for variable in layer.variables:
        rank = len(variable.shape)
        if variable.role.startswith(("query/", "key/", "value/")):
            # kernel (features, heads, head size), bias (heads, head size): split the heads
            axes: Axes = (None, MODEL, None) if rank == 3 else (MODEL, None)
            roles[variable.path] = (axes, "heads")
        elif variable.role == "attention_output/kernel" and rank == 3:
            roles[variable.path] = ((MODEL, None, None), "heads")
    if model > 1:
        layout.collectives.append(
            Collective(layer.name, "forward", layer.out_elements or 0, "heads' partial outputs")
        )
        layout.collectives.append(
            Collective(layer.name, "backward", layer.in_elements or 0, "input gradient sum")
        )


def _split_embedding(
    layer: LayerInfo, model: int, roles: dict[str, tuple[Axes, str]], layout: Layout
) -> None:
    table = _variable(layer, "embeddings")
    if table is None or len(table.shape) != 2:
        return
    vocabulary, features = table.shape
    if vocabulary % model == 0:
        roles[table.path] = ((MODEL, None), "vocabulary")
        why = "each device's looked-up rows summed"
    elif features % model == 0:
        roles[table.path] = ((None, MODEL), "features")
        why = "feature slices gathered"
    else:
        return
    if model > 1:
        layout.collectives.append(Collective(layer.name, "forward", layer.out_elements or 0, why))


def _variable(layer: LayerInfo | None, role: str) -> VariableInfo | None:
    if layer is None:
        return None
    return next((v for v in layer.variables if v.role == role), None)


def indivisible(layout: Layout, sizes: dict[str, int]) -> tuple[Placement, int, str] | None:
    """The first weight a user's or the model's own pattern splits over an axis that does not
    divide its dimension, with that dimension and axis; None when every split divides. The
    kit's rules never split what they cannot, but a pattern can ask for it, and JAX would
    refuse it deep inside building the model."""
    for placement in layout.placements:
        if placement.role not in ("user", "own"):
            continue
        for dimension, axis in enumerate(placement.axes):
            if axis and placement.shape[dimension] % sizes.get(axis, 1):
                return placement, dimension, axis
    return None
