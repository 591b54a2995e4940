"""`expert` on JAX: `keras.distribution.ModelParallel` over a (data, expert) mesh whose
`LayoutMap` puts each stacked expert kernel on the expert axis (`sharding/experts.py`), and on
request the experts dispatched (`dispatched_experts.py`).

>>> exp.run(strategy="expert", devices=4, backend="jax")
>>> exp.run(strategy="expert", devices=4, experts="dispatched", capacity_factor=1.25, backend="jax")
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from ...errors import GpkError
from ...runs.description.run_spec import RunSpec
from ...sharding.experts import (
    ExpertBank,
    ExpertWork,
    dispatched_activation_bytes,
    expert_layout,
    expert_work,
    find_banks,
)
from ...sharding.layout import Layout
from ...strategies.expert import DISPATCHED
from ...strategies.fsdp import DATA_AXIS, MODEL_AXIS
from ...strategies.tensor import OWN_LAYOUT
from ..measuring.stats import Timing
from ..strategy_hooks import ModelAndBatches
from .placed import placed_bytes
from .strategies import TensorParallel


class ExpertParallel(TensorParallel):
    """The experts of a mixture of experts spread over the expert axis, every other weight whole
    (or where the model's own layout puts it, with `layout_map="own"`).

    The model is read before it is built for real, as `TensorParallel` reads it: the expert
    banks are found on the first build's layers, and their kernels placed by the `LayoutMap` of
    the second. With `experts="dispatched"` each MoE block of the built model then routes its
    tokens through the kit's `DispatchedExperts`.

    >>> exp.run(strategy="expert", devices=4, mesh=(2, 2), backend="jax")
    """

    def __init__(self, spec: RunSpec, devices: list[Any]) -> None:
        super().__init__(spec, devices)
        self.banks: list[ExpertBank] = []
        self.blocks: list[Any] = []
        self.dispatched: list[Any] = []
        self.dropped: Any = None  # DroppedTokens of the trained model, dispatched
        self.top_k: list[int] = []

    @property
    def method(self) -> str:  # type: ignore[override]
        if self.spec.experts == DISPATCHED:
            return (
                "standalone: the dispatched experts' all-to-alls alone (each block's buffers "
                "sent over the expert axis and back, forward and backward) and the gradients' "
                "all-reduce over the data axis, on arrays of the sizes they move"
            )
        return (
            "standalone: the layout's collectives alone (each dense bank's output and its "
            "input's gradient summed over the expert axis, the gradients over the data axis) "
            "on arrays of the sizes they move; XLA places them inside the layers"
        )

    def build(self, builder: Callable[[], keras.Model], sample: Any) -> keras.Model:
        from .dispatched_experts import moe_blocks, swap_in  # noqa: PLC0415

        model = super().build(builder, sample)
        dispatched = self.spec.experts == DISPATCHED
        try:
            blocks = moe_blocks(model, self.banks)
        except GpkError:
            if dispatched:
                raise
            blocks = []  # dense: keras-hub's bank trains as it is, its top-k unread
        self.top_k = [block.top_k for block in blocks]
        if dispatched:
            from jax.sharding import Mesh  # noqa: PLC0415

            data, expert = self.spec.mesh_shape
            mesh = Mesh(np.asarray(self.devices).reshape(data, expert), (DATA_AXIS, MODEL_AXIS))
            with self.scope():
                self.dispatched = swap_in(blocks, mesh, self.spec.capacity_factor)
            self.blocks = blocks
        return model

    def before_training(self, run: ModelAndBatches) -> None:
        """The memory budget; then each dispatched block held against its own call on the
        run's first batch, refused in one sentence if it differs."""
        super().before_training(run)
        if not self.blocks:
            return
        from .dispatched_experts import check_swap  # noqa: PLC0415

        x, _ = run.batches[0]
        with self.scope():
            check_swap(self.blocks, run.model, x)

    def derive(self, layers: list[Any], own: Any = None) -> Layout:
        _, expert = self.spec.mesh_shape
        self.banks = find_banks(layers)
        if not self.banks:
            raise GpkError(
                "strategy='expert' found no mixture-of-experts block in the model (a router "
                "kernel (width, E) beside stacked expert kernels (E, ...)); use "
                "strategy='tensor' or strategy='fsdp' to split a dense model"
            )
        for bank in self.banks:
            if bank.experts % expert:
                raise GpkError(
                    f"the expert axis of {expert} devices does not divide the {bank.experts} "
                    f"experts of {bank.layer!r}; use a mesh whose expert axis divides "
                    f"{bank.experts}, e.g. mesh=(1, {_divisor(bank.experts, expert)})"
                )
        dispatched = self.spec.experts == DISPATCHED
        devices = len(self.devices)
        tokens = self.spec.global_batch * self.banks[0].tokens_per_sample
        if dispatched and tokens % devices:
            raise GpkError(
                f"experts='dispatched' splits the {tokens} tokens of a global batch over "
                f"{devices} devices, which does not divide them; use a batch size whose tokens "
                f"{devices} divides, or experts='dense'"
            )
        if own is not None:
            return expert_layout(layers, self.banks, expert, own, OWN_LAYOUT, dispatched)
        return expert_layout(layers, self.banks, expert, self.spec.layout_map, "user", dispatched)

    def describe(self) -> str:
        if self.spec.experts == DISPATCHED:
            return "all-to-all over the expert axis (dispatched experts, jax.shard_map)"
        return "xla collectives (ModelParallel, experts on the expert axis)"

    def after_training(self, run: ModelAndBatches) -> None:
        """The dispatched blocks' dropped tokens, counted in one forward pass on the run's
        first batch through the trained model."""
        if not self.dispatched:
            return
        from .dispatched_experts import dropped_tokens  # noqa: PLC0415

        x, _ = run.batches[0]
        try:
            with self.scope():
                self.dropped = dropped_tokens(self.dispatched, run.model, x)
        except Exception:  # noqa: BLE001 - the count must not cost the run its row
            traceback.print_exc()

    def communication_timing(self, model: keras.Model, x: Any, y: Any) -> Timing | None:
        if self.spec.experts != DISPATCHED or len(self.devices) < 2:
            return super().communication_timing(model, x, y)
        from .comm import tensor_collectives  # noqa: PLC0415
        from .expert_comm import all_to_alls  # noqa: PLC0415

        work = self._work()
        gradient_bytes = self.traffic(model, 0).gradient_bytes
        if self.spec.mesh_shape[1] < 2:
            return tensor_collectives(self.devices, self.spec.mesh_shape, [], gradient_bytes)
        return all_to_alls(
            self.devices, self.spec.mesh_shape, work.all_to_all_bytes, gradient_bytes
        )

    def expert_activation_bytes(self, banks: list[ExpertBank]) -> int:
        """Dense: every local expert's outputs for every token (`TensorParallel`'s); dispatched:
        the local experts' outputs for their capacity's slots only."""
        if self.spec.experts != DISPATCHED or len(self.top_k) != len(banks):
            return super().expert_activation_bytes(banks)
        return dispatched_activation_bytes(
            banks,
            self.spec.global_batch,
            self.spec.mesh_shape,
            self.top_k,
            self.spec.capacity_factor,
        )

    def _work(self) -> ExpertWork:
        dispatched = self.spec.experts == DISPATCHED
        return expert_work(
            self.banks,
            self.spec.global_batch,
            self.spec.mesh_shape,
            self.top_k,
            self.spec.capacity_factor if dispatched else 1.0,
        )

    def traffic(self, model: keras.Model, parameter_bytes: int) -> Any:
        traffic = super().traffic(model, parameter_bytes)
        if traffic is None or self.spec.experts != DISPATCHED:
            return traffic
        from dataclasses import replace  # noqa: PLC0415

        moved = self._work().all_to_all_bytes
        return replace(
            traffic,
            activation_bytes=traffic.activation_bytes + moved,
            traffic_bytes_per_device=traffic.traffic_bytes_per_device + moved,
            collectives=traffic.collectives + 4 * len(self.banks),
        )

    def layout_fields(self, model: keras.Model) -> dict[str, Any]:
        fields = super().layout_fields(model)
        if not self.banks:
            return fields
        kernels = [v for v in model.weights if v.path in self._kernel_paths()]
        top_k = self.top_k if len(self.top_k) == len(self.banks) else [None] * len(self.banks)
        fields["experts"] = {
            "kind": self.spec.experts,
            "banks": [
                {"layer": b.layer, "experts": b.experts, "router": b.router, "top_k": k}
                for b, k in zip(self.banks, top_k, strict=True)
            ],
            "expert_bytes": sum(b.bytes for b in self.banks),
            "expert_bytes_per_device": placed_bytes(kernels),
        }
        if None in top_k:  # a bank of the user's own, its top-k unread: no FLOPs counted
            return fields
        work = self._work()
        dispatched = self.spec.experts == DISPATCHED
        fields["experts"].update(
            dense_expert_flops=work.dense_flops,
            expert_flops=work.dispatched_flops if dispatched else work.dense_flops,
        )
        if self.spec.experts == DISPATCHED:
            fields["experts"]["capacity_factor"] = self.spec.capacity_factor
            fields["experts"]["all_to_all_bytes"] = work.all_to_all_bytes
            if self.dropped is not None:
                dropped, routed = self.dropped
                fields["experts"].update(dropped_tokens=dropped, routed_tokens=routed)
        return fields

    def _kernel_paths(self) -> set[str]:
        return {k.path for b in self.banks for k in b.kernels}


def _divisor(experts: int, devices: int) -> int:
    """The largest count up to `devices` that divides `experts`."""
    return max(n for n in range(1, devices + 1) if experts % n == 0)
