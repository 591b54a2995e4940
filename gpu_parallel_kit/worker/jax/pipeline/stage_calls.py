"""One pipeline stage on JAX: its slice of the graph, its weights on its device, and its passes
compiled once each.

A stage calls the user's own layers statelessly: a functional sub-model over the traced graph's
tensors (`keras.Model(received, computed)`, the layers shared with the user's model) runs through
`stateless_call`, taking the weights as arguments, so no layer is rebuilt from its config. The
stage's trainable and non-trainable values, its optimizer's variables (a copy of the model's
optimizer, built over the stage's variables) and its summed gradients are JAX arrays committed to
the stage's device, or sharded over its `(data, model)` sub-mesh (`stage_mesh.py`); every
compiled pass therefore runs there.

The backward is `jax.vjp` of the forward. With `recompute=True` (the default) the forward keeps
nothing but its inputs and the backward compiles the forward and its pullback together, so it
recomputes the forward, as `jax.checkpoint` around the stage would; with `recompute=False` the
forward returns its pullback (the VJP's residuals, a pytree), held until the backward. Split
(zb-h1), B computes only the received tensors' gradients and W only the weights'; XLA drops the
other half of each. See `docs/strategies/pipeline.md`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import keras
import numpy as np

from ....pipeline.graph import StageCut
from ....pipeline.tasks import Pass
from ...pipeline.layer_graph import TracedModel
from ...pipeline.stage_failure import layers_named
from ...pipeline.stage_protocol import Backwarded, Forwarded, FusedPasses
from .stage_mesh import StagePlacement

LossFn = Callable[[Any, dict[str, Any]], Any]


_layers_named = layers_named("JAX", (jax.errors.JaxRuntimeError,), lambda stage: stage)


class StageFunctions:
    """One stage's weights on its device and its compiled passes.

    Args:
        index: the stage's position in the model, from 0.
        placement: its devices: one, or a (data, model) sub-mesh and the shardings on it
            (`stage_mesh.StagePlacement`).
        cut: its share of the graph (`pipeline.graph.StageCut`).
        traced: the model's graph (`worker/layer_graph.TracedModel`).
        optimizer: a fresh copy of the model's optimizer, for this stage alone.
        loss_fn: (targets, the values by tensor name) -> the micro-batch's mean loss, on the
            last stage; None elsewhere.
        micro_batches: M; each micro-batch's objective is divided by it, so the gradients summed
            over the micro-batches are those of the global batch's mean (`set_micro_batches`).
        recompute: whether the backward recomputes the forward (else the forward keeps its VJP).
    """

    def __init__(
        self,
        index: int,
        placement: StagePlacement,
        cut: StageCut,
        traced: TracedModel,
        optimizer: keras.optimizers.Optimizer,
        loss_fn: LossFn | None,
        micro_batches: int,
        recompute: bool,
    ) -> None:
        self.index, self.placement, self.cut = index, placement, cut
        self.device = placement.device
        self.loss_fn, self.recompute = loss_fn, recompute
        # Whether the stage's layers add losses of their own (an activity regularizer,
        # `add_loss`): known once its objective is traced, so the runner reports an earlier
        # stage's objective only where it holds something.
        self.adds_losses = False
        self.set_micro_batches(micro_batches)
        self.model = keras.Model(
            [traced.tensors[t] for t in cut.used],
            [traced.tensors[t] for t in cut.computed],
            name=f"stage_{index}",
        )
        self.optimizer = optimizer
        optimizer.build(self.model.trainable_variables)
        self.trainable = placement.put_weights(self.model.trainable_variables)
        self.non_trainable = placement.put_weights(self.model.non_trainable_variables)
        self.optimizer_state = placement.put_weights(
            optimizer.variables, like=self.model.trainable_variables
        )
        # Floating tensors carry gradients; token ids and masks ride along without.
        self.floating = {n for n in (*cut.received, *cut.computed) if _floating(traced, n)}
        # Stage 0's inputs are the data: nothing upstream wants their gradient.
        self.differentiated = tuple(n for n in cut.used if n in self.floating and index > 0)
        self.accumulated = [jnp.zeros_like(v) for v in self.trainable]
        # On a sub-mesh the gradient sums keep their weights' shards, as GSPMD would not promise.
        self._sum_shardings = placement.weights_like(self.model.trainable_variables)
        # Compiled when first called, once each: a stage runs one micro-batch shape.
        # A call donates the state it replaces, as Keras's train step donates its state: the
        # new values take the old buffers, where fresh ones would cost each call new pages.
        self._forward = jax.jit(self._forward_values if recompute else self._forward_and_pullback)
        backward = self._recomputed_backward if recompute else self._kept_pullback
        self._backward = {
            kind: jax.jit(backward(kind), donate_argnames=_summed(kind)) for kind in BACKWARD_PASSES
        }
        self._apply = jax.jit(
            self._applied, donate_argnames=("optimizer_state", "accumulated", "trainable")
        )
        # The last stage's forward and whole backward in one call, with the update or without
        # (`pipeline/fused_calls.py`); compiled only if the schedule runs them so. Its
        # statistics are not donated: a forward run apart may hold them for its backward.
        self._fused = {
            update: jax.jit(
                functools.partial(self._forward_backward, update=update),
                donate_argnames=("accumulated", "trainable", "optimizer_state")
                if update
                else ("accumulated",),
            )
            for update in (False, True)
        }
        # A one-stage model's steps, several in one call (`whole_steps`); compiled if run so.
        self._steps = jax.jit(
            self._whole_steps, donate_argnames=("trainable", "non_trainable", "optimizer_state")
        )
        # An output of the call that last updated the weights, never donated: waiting for it
        # waits for that update (`updated`).
        self._update_done: Any = None

    def set_micro_batches(self, micro_batches: int) -> None:
        """The M each micro-batch's objective is divided by: an argument of the compiled
        passes, so the micro-batch curve's traces serve training at the M it chooses."""
        self.micro_batches = micro_batches
        self.m = self.placement.put_scalar(jnp.float32(micro_batches))

    @property
    def variables(self) -> list[Any]:
        """The user's variables this stage trains and keeps (weights, then statistics)."""
        return [*self.model.trainable_variables, *self.model.non_trainable_variables]

    # The pure functions, traced once each by jax.jit.

    def _objective(self, trainable, non_trainable, received, y, m):
        """((floating computed tensors, own objective), (other computed tensors, new state))."""
        inputs = [received[n] for n in self.cut.used]
        with self.placement.tracing():  # its activations laid out (sequence parallelism)
            outputs, state, losses = self.model.stateless_call(
                trainable, non_trainable, inputs, training=True, return_losses=True
            )
        computed = dict(zip(self.cut.computed, keras.tree.flatten(outputs), strict=True))
        self.adds_losses = bool(losses)  # at trace time: the list's length is static
        objective = sum((jnp.sum(loss) for loss in losses), jnp.float32(0.0))
        if self.loss_fn is not None:
            objective = objective + self.loss_fn(y, {**received, **computed})
        objective = objective / m
        floating = [computed[n] for n in self.cut.computed if n in self.floating]
        others = [computed[n] for n in self.cut.computed if n not in self.floating]
        return (floating, objective), (others, state)

    def _pullback(self, trainable, non_trainable, received, y, m):
        def differentiable(trainable, wrt):
            return self._objective(trainable, non_trainable, {**received, **wrt}, y, m)

        wrt = {n: received[n] for n in self.differentiated}
        return jax.vjp(differentiable, trainable, wrt, has_aux=True)

    def _forward_values(self, trainable, non_trainable, received, y, m):
        (floating, objective), (others, state) = self._objective(
            trainable, non_trainable, received, y, m
        )
        return self._computed(floating, others), objective, state

    def _forward_and_pullback(self, trainable, non_trainable, received, y, m):
        (floating, objective), pullback, (others, state) = self._pullback(
            trainable, non_trainable, received, y, m
        )
        return self._computed(floating, others), objective, state, (pullback, (floating, objective))

    def _computed(self, floating: list, others: list) -> dict[str, Any]:
        made = iter(floating), iter(others)
        return {n: next(made[n not in self.floating]) for n in self.cut.computed}

    def _cotangent(self, outputs, upstream):
        """What the pullback is given: the computed tensors' gradients from downstream (zeros
        where none came), and 1 for the objective."""
        floating, objective = outputs
        names = [n for n in self.cut.computed if n in self.floating]
        grads = [
            upstream[n] if n in upstream else jnp.zeros_like(value)
            for n, value in zip(names, floating, strict=True)
        ]
        return grads, jnp.ones_like(objective)

    def _recomputed_backward(self, kind: Pass):
        def backward(trainable, non_trainable, received, y, m, upstream, accumulated):
            outputs, pullback, _ = self._pullback(trainable, non_trainable, received, y, m)
            return self._gradients(kind, pullback, self._cotangent(outputs, upstream), accumulated)

        return backward

    def _kept_pullback(self, kind: Pass):
        def backward(pullback, outputs, upstream, accumulated):
            return self._gradients(kind, pullback, self._cotangent(outputs, upstream), accumulated)

        return backward

    def _gradients(self, kind, pullback, cotangent, accumulated):
        weights, received = pullback(cotangent)
        summed = jax.tree.map(jnp.add, accumulated, weights)
        if self._sum_shardings is not None:
            summed = jax.lax.with_sharding_constraint(summed, self._sum_shardings)
        if kind is Pass.INPUT_BACKWARD:
            return received, None
        if kind is Pass.WEIGHT_BACKWARD:
            return None, summed
        return received, summed

    def _forward_backward(
        self, trainable, non_trainable, received, y, m, accumulated, optimizer_state, update
    ):
        """The objective, the new statistics, the received tensors' gradients, and the summed
        gradients; with `update`, the updated weights and optimizer state, the sums cleared."""
        outputs, pullback, (_, state) = self._pullback(trainable, non_trainable, received, y, m)
        grads, summed = self._gradients("BW", pullback, self._cotangent(outputs, {}), accumulated)
        if not update:
            return outputs[1], state, grads, summed
        trainable, optimizer_state, summed = self._update(optimizer_state, summed, trainable)
        return outputs[1], state, grads, summed, trainable, optimizer_state

    def _whole_steps(self, trainable, non_trainable, received, ys, m, optimizer_state):
        """Each step in turn (forward, backward, update), as Keras's train function unrolls
        `steps_per_execution` steps: the objectives, then the state the last step leaves. A
        step of one micro-batch applies its gradients as they come: no sum to add them to, and
        none to clear, as Keras's train step keeps none."""
        objectives = []
        for inputs, y in zip(received, ys, strict=True):
            outputs, pullback, (_, non_trainable) = self._pullback(
                trainable, non_trainable, inputs, y, m
            )
            grads, _ = pullback(self._cotangent(outputs, {}))
            trainable, optimizer_state = self._applied_gradients(optimizer_state, grads, trainable)
            objectives.append(outputs[1])
        return jnp.stack(objectives), non_trainable, trainable, optimizer_state

    def _applied(self, optimizer_state, accumulated, trainable):
        """`_update`, and a flag computed by the same call (`updated`)."""
        return (*self._update(optimizer_state, accumulated, trainable), jnp.ones((), jnp.bool_))

    def _update(self, optimizer_state, accumulated, trainable):
        trainable, optimizer_state = self._applied_gradients(
            optimizer_state, accumulated, trainable
        )
        cleared = jax.tree.map(jnp.zeros_like, accumulated)
        if self._sum_shardings is not None:
            cleared = jax.lax.with_sharding_constraint(cleared, self._sum_shardings)
        return trainable, optimizer_state, cleared

    def _applied_gradients(self, optimizer_state, gradients, trainable):
        """The weights and optimizer state after one update by `gradients`, the weights kept
        on their shards."""
        trainable, optimizer_state = self.optimizer.stateless_apply(
            optimizer_state, gradients, trainable
        )
        if self._sum_shardings is not None:
            trainable = jax.lax.with_sharding_constraint(trainable, self._sum_shardings)
        return trainable, optimizer_state

    # The tasks the runner calls, on values already on this stage's device.

    # The stage as the shared runner asks it (`worker/pipeline/schedule_runner.PipelineStage`).

    fuses = True  # the last stage's passes can run as one call (`forward_backward`)
    runs_ahead = True  # JAX dispatches asynchronously: a call returns before its work is done

    def begin_step(self) -> None:
        """Nothing to clear: an update starts the sums again."""

    def put(self, tensors: dict[str, Any]) -> dict[str, Any]:
        """What crosses into the stage, moved onto its device or sub-mesh: the copy across
        the cut."""
        return self.placement.put_batch(tensors)

    def labels(self, y: Any) -> Any:
        """The micro-batch's targets on this stage's devices, where it computes the loss."""
        return None if self.loss_fn is None else self.placement.put_batch(y)

    def gradients(self) -> list[Any]:
        return self.accumulated

    def updated(self) -> Any:
        """An output of the call that last updated the weights: the weights themselves are
        donated to the next call, so a wait for an update held past it waits for this."""
        return self.trainable if self._update_done is None else self._update_done

    def wait(self, values: Any) -> None:
        """JAX dispatches asynchronously: until `values` are computed."""
        jax.block_until_ready(values)

    def nbytes(self, tensors: dict[str, Any]) -> int:
        return nbytes(tensors)

    def snapshot(self) -> tuple[Any, ...]:
        """A copy of the weights, statistics, optimizer state and gradient sums, for `restore`:
        passes timed to measure, not to train, put them back. A copy, since the calls donate
        the state they replace."""
        return _copied((self.trainable, self.non_trainable, self.optimizer_state, self.accumulated))

    def restore(self, state: tuple[Any, ...]) -> None:
        """The state of a `snapshot`, copied again: one snapshot may be restored several times."""
        self.trainable, self.non_trainable, self.optimizer_state, self.accumulated = _copied(state)
        self._update_done = None

    @_layers_named
    def forward(self, received: dict[str, Any], y: Any) -> Forwarded:
        """What crosses out of the stage by name, the objective (the loss share on the last
        stage, the share of the losses its layers add elsewhere, None without) and what the
        backward needs; the stage's statistics advance once, here."""
        before = self.non_trainable
        m = self.m
        computed, objective, state, *kept = self._forward(self.trainable, before, received, y, m)
        # Recomputed: the inputs and the statistics the forward began from; else the pullback.
        saved = (before, received, y, m) if self.recompute else kept[0]
        self.non_trainable = state
        if self.loss_fn is None and not self.adds_losses:
            objective = None
        return Forwarded(self.sent(received, computed), objective, saved)

    def sent(self, received: dict[str, Any], computed: dict[str, Any]) -> dict[str, Any]:
        """What crosses out: its computed tensors and those it passes through."""
        return {n: computed[n] if n in computed else received[n] for n in self.cut.sent}

    def backward(self, saved: Any, upstream: dict[str, Any], y: Any, part: Pass) -> Backwarded:
        """The gradients of what the stage received, by name, to send upstream, and what the
        weight pass needs after an input pass. The targets `y` are in `saved` already."""
        return self._backward_pass(saved, upstream, part)

    def weight_backward(self, later: Any) -> None:
        """The weights' half of a split backward, added to the sums."""
        self._backward_pass(*later, Pass.WEIGHT_BACKWARD)

    @_layers_named
    def _backward_pass(self, saved: Any, upstream: dict[str, Any], kind: Pass) -> Backwarded:
        """The gradients of what the stage received, by name, to send upstream (None for a
        weight backward), and what the weight backward needs; its weights' gradients join the
        sum (not for an input backward)."""
        computed_upstream = {n: g for n, g in upstream.items() if n in self.cut.computed}
        head = (self.trainable, *saved) if self.recompute else saved
        grads, summed = self._backward[kind](*head, computed_upstream, self.accumulated)
        if summed is not None:
            self.accumulated = summed
        if grads is None:
            return Backwarded(None, (saved, upstream))
        # A tensor passed through adds its downstream gradient to its own.
        sent_back = dict(grads)
        for name in self.cut.passed_through:
            if name in upstream and name in self.floating:
                own = sent_back.get(name)
                sent_back[name] = upstream[name] if own is None else own + upstream[name]
        return Backwarded(sent_back, (saved, upstream))

    @_layers_named
    def forward_backward(self, received: dict[str, Any], y: Any, update: bool) -> FusedPasses:
        """The last stage's forward and whole backward of one micro-batch in one call, and with
        `update` its optimizer update too (`pipeline/fused_calls.py`): the received tensors'
        gradients by name, and the objective."""
        values = self._fused[update](
            self.trainable,
            self.non_trainable,
            received,
            y,
            self.m,
            self.accumulated,
            self.optimizer_state,
        )
        objective, self.non_trainable, grads, self.accumulated, *updated = values
        if update:
            self.trainable, self.optimizer_state = updated
            self._update_done = objective
        return FusedPasses(dict(grads), objective)

    @_layers_named
    def whole_steps(self, read: Any, count: int) -> Any:
        """`count` whole steps of a one-stage model (forward, backward, update each) in one
        call, as Keras's train function runs `steps_per_execution` steps on the batches it
        was given: the steps' objectives, in one array. `read()` gives each batch's inputs by
        name and its targets."""
        batches = [read() for _ in range(count)]
        # One transfer for every batch of the call, as Keras's JAX trainer passes its batches.
        received, ys = self.placement.put_batch(([x for x, _ in batches], [y for _, y in batches]))
        objectives, self.non_trainable, self.trainable, self.optimizer_state = self._steps(
            self.trainable, self.non_trainable, received, ys, self.m, self.optimizer_state
        )
        self._update_done = objectives
        return objectives

    def apply(self) -> None:
        """The summed gradients applied once, by this stage's optimizer; the sum starts again."""
        self.trainable, self.optimizer_state, self.accumulated, self._update_done = self._apply(
            self.optimizer_state, self.accumulated, self.trainable
        )

    def copy_back(self) -> None:
        """The trained weights and statistics into the user's own variables."""
        values = [*self.trainable, *self.non_trainable]
        for variable, value in zip(self.variables, values, strict=True):
            variable.assign(jax.device_get(value))


# The backward passes a stage compiles, once each when first called.
BACKWARD_PASSES = (Pass.BACKWARD, Pass.INPUT_BACKWARD, Pass.WEIGHT_BACKWARD)


def _summed(kind: Pass) -> tuple[str, ...]:
    """What a backward pass of `kind` donates: the gradient sums it replaces (an input
    backward adds nothing to them)."""
    return () if kind is Pass.INPUT_BACKWARD else ("accumulated",)


def _copied(state: Any) -> Any:
    """Each array of `state` copied where it lives."""
    return jax.tree.map(lambda a: jax.device_put(a, a.sharding, may_alias=False), state)


def split(batch: Any, parts: int) -> list[Any]:
    """A batch (an array, or a tuple or dict of them) as `parts` micro-batches."""
    if parts == 1:
        return [jax.tree.map(np.asarray, batch)]
    flat = [np.split(np.asarray(a), parts) for a in jax.tree.leaves(batch)]
    structure = jax.tree.structure(batch)
    return [jax.tree.unflatten(structure, [pieces[i] for pieces in flat]) for i in range(parts)]


def front(batch: Any, size: int) -> Any:
    """The first `size` samples of a batch (an array, or a tuple or dict of them)."""
    return jax.tree.map(lambda array: array[:size], batch)


def nbytes(tensors: dict[str, Any]) -> int:
    return sum(int(np.prod(t.shape)) * t.dtype.itemsize for t in tensors.values())


def _floating(traced: TracedModel, name: str) -> bool:
    dtype = keras.backend.standardize_dtype(traced.tensors[name].dtype)
    return jnp.issubdtype(jnp.dtype(dtype), jnp.floating)
