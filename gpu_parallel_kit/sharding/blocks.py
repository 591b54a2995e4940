"""Tensor-parallel rules inside a Transformer block that is one layer (keras-hub's decoder and
encoder blocks, a user's own block layer): its weights read by their roles and shapes.

The block's attention and MLP are split as `layout.py` splits them when they are layers of
their own (Megatron-LM's pattern):
- attention: the query, key and value kernels split their heads, whether laid out (features,
  heads, head size), as Keras's attention does, or (heads, features, head size), as Gemma's; the
  output projection (heads, head size, features) splits its heads axis. Grouped-query
  attention's key and value, with fewer heads, split only where the model axis divides them;
  otherwise they stay whole and every device keeps them all.
- MLP: the block's last 2-D kernel is the row (hidden, features), split on its input; the
  kernels shaped as its transpose are the columns, split on `hidden` (a gated MLP has two: the
  gate and the up projection). Biases follow their kernels.
The MLP's names are not read: keras-hub calls them "feedforward_gate_dense", Gemma "ffw_gating",
a user anything; shapes and order decide, so a rule never splits what it cannot pair.
Pure: `LayerInfo`s in, axes out.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .layout import Axes, Collective, LayerInfo, Layout, VariableInfo

MODEL = "model"
_PROJECTION = re.compile(r"(?:^|/)(?:query|key|value)(?:_dense)?/kernel$")
_OUTPUT = re.compile(r"(?:^|/)(?:attention_output|output_dense|o_proj|out_proj)/kernel$")


def split_block(
    layer: LayerInfo,
    model: int,
    roles: dict[str, tuple[Axes, str]],
    layout: Layout,
    collective: type[Collective],
) -> None:
    """The block's attention heads and MLP columns and rows over `model` devices, in `roles`."""
    split_attention = _split_attention(layer, model, roles)
    split_mlp = _split_mlp(layer, model, roles)
    if model > 1 and (split_attention or split_mlp):
        layout.collectives.append(
            collective(layer.name, "forward", layer.out_elements or 0, "block's partial outputs")
        )
        layout.collectives.append(
            collective(layer.name, "backward", layer.in_elements or 0, "input gradient sum")
        )


def _split_attention(layer: LayerInfo, model: int, roles: dict[str, tuple[Axes, str]]) -> bool:
    outputs = [v for v in layer.variables if _OUTPUT.search(v.role) and len(v.shape) == 3]
    if len(outputs) != 1:
        return False
    output = outputs[0]
    width = output.shape[-1]  # (heads, head size, features): the block's stream
    split = False
    if output.shape[0] % model == 0:
        roles[output.path] = ((MODEL, None, None), "heads")
        split = True
    for variable in layer.variables:
        if not (_PROJECTION.search(variable.role) and len(variable.shape) == 3):
            continue
        # (features, heads, head size) as Keras's attention lays it out, or (heads, features,
        # head size) as Gemma's does: the heads are the axis that is not the stream's width.
        axis = 1 if variable.shape[0] == width else 0 if variable.shape[1] == width else None
        if axis is None or variable.shape[axis] % model:
            continue  # grouped-query key and value with fewer heads than devices stay whole
        axes: list[str | None] = [None, None, None]
        axes[axis] = MODEL
        roles[variable.path] = (tuple(axes), "heads")
        bias = _sibling(layer, variable, "bias")
        if bias is not None and len(bias.shape) == 2:
            roles[bias.path] = ((MODEL, None), "heads")
        split = True
    return split


def _split_mlp(layer: LayerInfo, model: int, roles: dict[str, tuple[Axes, str]]) -> bool:
    """The block's last 2-D kernel is the MLP's row; the kernels shaped as its transpose are its
    columns (two in a gated MLP). Created in that order by keras-hub's blocks, and by any block
    written as the MLP reads: up (and gate), then down."""
    kernels = [
        v
        for v in layer.variables
        if v.role.endswith("kernel")
        and len(v.shape) == 2
        and not (_PROJECTION.search(v.role) or _OUTPUT.search(v.role))
    ]
    if len(kernels) < 2:
        return False
    row = kernels[-1]
    hidden, features = row.shape
    columns = [v for v in kernels[:-1] if v.shape == (features, hidden)]
    if not columns or hidden % model:
        return False
    for column in columns:
        roles[column.path] = ((None, MODEL), "column")
        bias = _sibling(layer, column, "bias")
        if bias is not None:
            roles[bias.path] = ((MODEL,), "column")
    roles[row.path] = ((MODEL, None), "row")
    return True


def _sibling(layer: LayerInfo, kernel: VariableInfo, name: str) -> VariableInfo | None:
    """The variable of the same sublayer as `kernel` named `name` (its bias)."""
    wanted = kernel.role[: -len("kernel")] + name
    return next((v for v in layer.variables if v.role == wanted), None)
