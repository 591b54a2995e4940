"""What one stage does in a forward and a backward task: eagerly, or as compiled functions.

Eager tasks keep each micro-batch's gradient tape from its forward to its backward. Compiled
tasks (`recompute=True`) run each task as one `tf.function` and recompute the forward under a
tape in the backward, as GPipe does; the stage's `non_trainable_variables` (BatchNormalization
statistics, seed-generator states) are saved and restored around the recompute, so statistics
update once per micro-batch and Dropout draws the same masks. zb-h1's B and W are two gradient
calls on one tape, or two recomputes when compiled. Gradients are summed on the stage's device
and applied once per global batch; a variable the forward never reads is left out of the update,
and the stage's own `add_loss` losses join its objective, and the step's reported loss (a
forward's objective). Both classes are the stage objects the shared runner
(`worker/pipeline/schedule_runner.py`) asks, each call on the stage's device. See
`docs/strategies/pipeline.md`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from ....pipeline.tasks import Pass
from ...pipeline.stage_failure import layers_named
from ...pipeline.stage_protocol import Backwarded, Forwarded, FusedPasses
from .stages import Stage

LossFn = Callable[[Any, dict[str, tf.Tensor]], tf.Tensor]


class _StageTracing(logging.Filter):
    """TensorFlow warns when functions made from one piece of Python code trace often; every
    stage makes its own compiled tasks from the same code, each traced once, which is expected
    here and says nothing to the user. Other retracing warnings (their own code) pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not ("triggered tf.function retracing" in text and "CompiledTasks" in text)


tf.get_logger().addFilter(_StageTracing())


_layers_named = layers_named("TensorFlow", (tf.errors.OpError,), lambda tasks: tasks.stage)


class _OnDevice:
    """What every TensorFlow stage gives the runner beside its passes: the copies onto its
    device, the waits, the sizes, and the state a timing pass puts back."""

    stage: Stage
    # TensorFlow's eager executor runs each call through before it returns (its default,
    # synchronous execution): a step is done once dispatched.
    runs_ahead = False

    @property
    def index(self) -> int:
        return self.stage.index

    def put(self, tensors: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """What crosses into the stage, copied onto its device: the transfer across the cut."""
        with tf.device(self.stage.device):
            return {name: tf.identity(value) for name, value in tensors.items()}

    def labels(self, y: Any) -> Any:
        return y

    def updated(self) -> list[Any]:
        """The stage's variables, read when waited for: TensorFlow updates them in place."""
        return list(self.stage.variables)

    def wait(self, values: Any) -> None:
        """On GPUs ops return before they finish; a timed task ends when its work does."""
        wait_for(values)

    def nbytes(self, tensors: dict[str, tf.Tensor]) -> int:
        return nbytes(tensors)

    def snapshot(self) -> list[Any]:
        """The stage's variables and its optimizer's as they are, for `restore`: passes timed
        to measure, not to train, put them back."""
        return [v.numpy() for v in self._state_variables()]

    def restore(self, values: list[Any]) -> None:
        for variable, value in zip(self._state_variables(), values, strict=True):
            variable.assign(value)

    def _state_variables(self) -> list[Any]:
        return [*self.stage.model.variables, *self.stage.optimizer.variables]


class EagerTasks(_OnDevice):
    """Tape kept from forward to backward; every operation dispatched eagerly."""

    # No call to save: the tape already spans the forward and its backward. A compiled call
    # here would also change the arithmetic that eager training promises to match.
    fuses = False

    def __init__(
        self, stage: Stage, loss_fn: LossFn | None, micro_batches: int, split: bool = False
    ) -> None:
        self.stage = stage
        self.loss_fn = loss_fn  # the last stage only
        self.micro_batches = micro_batches
        self.split = split  # B and W are separate tasks: the tape must serve two calls
        self._accumulated: list[tf.Tensor] = []
        self._unread: set[int] = set()  # variables the forward never reads: no gradient
        self._zeros: list[tf.Tensor] | None = None  # each variable's, where its sum starts

    def set_micro_batches(self, micro_batches: int) -> None:
        """The M the loss is shared over, once "auto" has chosen it."""
        self.micro_batches = micro_batches

    def begin_step(self) -> None:
        if self._zeros is None:  # made once: the sums are new tensors, the zeros never change
            with tf.device(self.stage.device):
                self._zeros = [tf.zeros(v.shape, dtype=v.dtype) for v in self.stage.variables]
        self._accumulated = list(self._zeros)

    def gradients(self) -> list[tf.Tensor]:
        return self._accumulated

    @_layers_named
    def forward(self, received: dict[str, tf.Tensor], y: Any) -> Forwarded:
        """What to send on (the loss on the last stage), the objective (the loss, or the share
        of the losses the stage's layers add, None without) and what the backward needs."""
        with tf.device(self.stage.device):
            return self._forward(received, y)

    def _forward(self, received: dict[str, tf.Tensor], y: Any) -> Forwarded:
        stage = self.stage
        with tf.GradientTape(persistent=self.split) as tape:
            tape.watch([received[n] for n in _differentiated(stage, received, self.loss_fn)])
            out = stage.forward(received, training=True)
            own = _own_losses(stage)
            if self.loss_fn is not None:
                # Mean over the micro-batch / M: the micro-batches' gradients sum to the
                # gradient of the global batch's mean loss.
                out = _with_own(self.loss_fn(y, out), own) / self.micro_batches
                own = None
            elif own is not None:
                own = own / self.micro_batches
        objective = out if self.loss_fn is not None else own
        return Forwarded(out, objective, (tape, received, out, own))

    @_layers_named
    def backward(
        self, saved: Any, upstream: dict[str, tf.Tensor], y: Any, part: Pass
    ) -> Backwarded:
        """The received tensors' gradients, and what the weight pass needs after an input
        pass."""
        with tf.device(self.stage.device):
            return self._backward(saved, upstream, part is Pass.INPUT_BACKWARD)

    def _backward(
        self, saved: Any, upstream: dict[str, tf.Tensor], inputs_only: bool
    ) -> Backwarded:
        tape, received, out, own = saved
        stage = self.stage
        used = _differentiated(stage, received, self.loss_fn)
        if self.loss_fn is not None:
            targets, weights = out, None
        else:
            computed = [n for n in stage.cut.computed if n in upstream]
            targets, weights = [out[n] for n in computed], [upstream[n] for n in computed]
            if own is not None:
                targets, weights = [*targets, own], [*weights, tf.ones_like(own)]
        sources = [received[n] for n in used]
        if not inputs_only:
            sources += list(stage.variables)
        grads = tape.gradient(targets, sources, output_gradients=weights)
        if not inputs_only:
            self._accumulate(grads[len(used) :])
        by_name = dict(
            zip(used, _zero_filled(grads[: len(used)], sources[: len(used)]), strict=True)
        )
        later = (tape, targets, weights) if inputs_only else None
        return Backwarded(_received_gradients(stage, by_name, upstream), later)

    @_layers_named
    def weight_backward(self, later: Any) -> None:
        """W: the variables' gradients from the same tape, then the tape is let go."""
        tape, targets, weights = later
        with tf.device(self.stage.device):
            self._accumulate(
                tape.gradient(targets, list(self.stage.variables), output_gradients=weights)
            )

    def _accumulate(self, grads: list[tf.Tensor | None]) -> None:
        self._unread |= {i for i, g in enumerate(grads) if g is None}
        self._accumulated = [
            a if g is None else a + g for a, g in zip(self._accumulated, grads, strict=True)
        ]

    def apply(self) -> None:
        pairs = _updated(self._accumulated, self.stage.variables, self._unread)
        if pairs:  # a stage of layers without weights (Concatenate, Add) has nothing
            with tf.device(self.stage.device):
                self.stage.optimizer.apply_gradients(pairs)


class CompiledTasks(_OnDevice):
    """Each task one compiled function; the backward recomputes its forward (see the module)."""

    fuses = True  # the last stage's forward and backward in one call (`forward_backward`)

    def __init__(
        self, stage: Stage, loss_fn: LossFn | None, micro_batches: int, split: bool = False
    ) -> None:
        self.stage = stage
        self.loss_fn = loss_fn
        self.micro_batches = micro_batches
        self.split = split
        with tf.device(stage.device):
            self._sums = [tf.Variable(tf.zeros_like(v), trainable=False) for v in stage.variables]
            # A variable, not a constant baked into the trace: the micro-batch curve times these
            # same functions before "auto" chooses M, and training must not trace them again.
            self._shares = tf.Variable(float(micro_batches), trainable=False)
        self._state = list(stage.model.non_trainable_variables)
        self._unread: set[int] = set()  # found while tracing a backward, before any update
        self._forward = tf.function(self._forward_body, reduce_retracing=True)
        self._backward = {
            part: tf.function(
                lambda inputs, weights, state, y, part=part: self._backward_body(
                    inputs, weights, state, y, part
                ),
                reduce_retracing=True,
            )
            for part in (Pass.BACKWARD, Pass.INPUT_BACKWARD, Pass.WEIGHT_BACKWARD)
        }
        self._apply = tf.function(self._apply_body)
        self._reset = tf.function(self._reset_body)
        # The last stage's forward and whole backward in one call, with the update or without
        # (`pipeline/fused_calls.py`); traced only if the schedule runs them so.
        self._fused = {
            update: tf.function(
                functools.partial(self._forward_backward_body, update=update),
                reduce_retracing=True,
            )
            for update in (False, True)
        }
        self._summed = False  # gradients summed since the last update: cleared at the next step
        # A one-stage model's steps, several in one call (`whole_steps`): (its reader, the
        # function reading from it), traced if run so.
        self._steps: tuple[Any, Any] | None = None

    def set_micro_batches(self, micro_batches: int) -> None:
        """The M the loss is shared over, once "auto" has chosen it."""
        self.micro_batches = micro_batches
        self._shares.assign(float(micro_batches))

    def begin_step(self) -> None:
        if self._summed:  # an update clears the sums; a step that ended early did not
            with tf.device(self.stage.device):
                self._reset()
            self._summed = False

    def gradients(self) -> list[tf.Tensor]:
        return [total.value for total in self._sums]

    @_layers_named
    def forward_backward(self, received: dict[str, tf.Tensor], y: Any, update: bool) -> FusedPasses:
        """The last stage's forward and whole backward of one micro-batch in one call, and with
        `update` its optimizer update too (`pipeline/fused_calls.py`): the received tensors'
        gradients by name, and the micro-batch's loss share."""
        stage = self.stage
        inputs = [received[n] for n in stage.cut.received]
        with tf.device(stage.device):
            grads, loss = self._fused[update](inputs, y)
        self._summed = not update
        floating = _differentiated(
            stage, dict(zip(stage.cut.received, inputs, strict=True)), self.loss_fn
        )
        return FusedPasses(
            _received_gradients(stage, dict(zip(floating, grads, strict=True)), {}), loss
        )

    @_layers_named
    def whole_steps(self, read: Any, count: int) -> tf.Tensor:
        """`count` whole steps of a one-stage model (forward, backward, update each) in one
        call, each batch read inside it (`read()`: the inputs by name and the targets), as
        Keras's train function runs `steps_per_execution` steps on its iterator: the steps'
        losses, in one tensor."""
        if self._steps is None or self._steps[0] is not read:
            body = functools.partial(self._steps_body, read)
            self._steps = (read, tf.function(body, reduce_retracing=True))
        with tf.device(self.stage.device):
            return self._steps[1](count)

    @_layers_named
    def forward(self, received: dict[str, tf.Tensor], y: Any) -> Forwarded:
        """As `EagerTasks.forward`; what the backward keeps is the inputs and the state."""
        stage = self.stage
        inputs = [received[n] for n in stage.cut.received]
        with tf.device(stage.device):
            out, state, own = self._forward(inputs, y if self.loss_fn is not None else ())
        if self.loss_fn is not None:
            return Forwarded(out, out, (inputs, state, ()))
        shapes = tuple((t.shape, t.dtype) for t in out)  # not the tensors: they are freed
        return Forwarded(stage.sent(received, out), own, (inputs, state, shapes))

    @_layers_named
    def backward(
        self, saved: Any, upstream: dict[str, tf.Tensor], y: Any, part: Pass
    ) -> Backwarded:
        with tf.device(self.stage.device):
            return self._backward_pass(saved, upstream, y, part)

    def _backward_pass(
        self, saved: Any, upstream: dict[str, tf.Tensor], y: Any, part: Pass
    ) -> Backwarded:
        inputs, state, shapes = saved
        stage = self.stage
        # The last stage differentiates its loss; the others weigh their outputs by the
        # gradients sent back (zero for an output nobody sent one for: an integer tensor).
        weights = (
            [
                upstream[n] if n in upstream else tf.zeros(shape, dtype)
                for n, (shape, dtype) in zip(stage.cut.computed, shapes, strict=True)
            ]
            if self.loss_fn is None
            else []
        )
        targets = y if self.loss_fn is not None else ()
        grads = self._backward[part](inputs, weights, state, targets)
        self._summed = self._summed or part is not Pass.INPUT_BACKWARD
        floating = _differentiated(
            stage, dict(zip(stage.cut.received, inputs, strict=True)), self.loss_fn
        )
        later = (inputs, weights, state, targets) if part is Pass.INPUT_BACKWARD else None
        sent = _received_gradients(stage, dict(zip(floating, grads, strict=True)), upstream)
        return Backwarded(sent, later)

    @_layers_named
    def weight_backward(self, later: Any) -> None:
        """W: recompute once more, and add the variables' gradients to the sums."""
        with tf.device(self.stage.device):
            self._backward[Pass.WEIGHT_BACKWARD](*later)
        self._summed = True

    def apply(self) -> None:
        if _updated(self._sums, self.stage.variables, self._unread):  # else nothing to update
            with tf.device(self.stage.device):
                self._apply()
            self._summed = False

    def _used(self, inputs: list[tf.Tensor]) -> list[tf.Tensor]:
        by_name = dict(zip(self.stage.cut.received, inputs, strict=True))
        return [by_name[n] for n in self.stage.cut.used]

    def _run(self, inputs: list[tf.Tensor], y: Any) -> tuple[Any, tf.Tensor | None]:
        """The stage's forward in training mode, and its layers' own losses' share; on the last
        stage, the micro-batch's loss share, its layers' own included."""
        stage = self.stage
        outputs = tf.nest.flatten(stage.model(self._used(inputs), training=True))
        own = _own_losses(stage)
        if self.loss_fn is None:
            return outputs, None if own is None else own / tf.cast(self._shares, own.dtype)
        by_name = dict(zip(stage.cut.received, inputs, strict=True))
        loss = _with_own(self.loss_fn(y, stage.sent(by_name, outputs)), own)
        return loss / tf.cast(self._shares, loss.dtype), None

    def _forward_body(
        self, inputs: list[tf.Tensor], y: Any
    ) -> tuple[Any, list[tf.Tensor], tf.Tensor | None]:
        state = [tf.identity(v.value) for v in self._state]  # before: the recompute starts here
        with tf.control_dependencies(state):
            out, own = self._run(inputs, y)
        return out, state, own

    def _backward_body(
        self,
        inputs: list[tf.Tensor],
        weights: list[tf.Tensor],
        state: list[tf.Tensor],
        y: Any,
        part: Pass,
    ) -> list[tf.Tensor]:
        """The gradients of `part`: a whole backward's (inputs returned, variables summed), an
        input backward's (the inputs alone) or a weight backward's (the variables, summed)."""
        stage = self.stage
        now = [tf.identity(v.value) for v in self._state]
        with tf.control_dependencies(now):
            for variable, value in zip(self._state, state, strict=True):
                variable.assign(value)  # the seeds (and statistics) the forward started from
        by_name = dict(zip(stage.cut.received, inputs, strict=True))
        watched = [by_name[n] for n in _differentiated(stage, by_name, self.loss_fn)]
        with tf.GradientTape() as tape:
            tape.watch(watched)
            out, own = self._run(inputs, y)
        if own is not None:
            out, weights = [*out, own], [*weights, tf.ones_like(own)]
        sources = [] if part is Pass.WEIGHT_BACKWARD else list(watched)
        if part is not Pass.INPUT_BACKWARD:
            sources += list(stage.variables)
        grads = tape.gradient(out, sources, output_gradients=weights or None)
        # Embeddings give IndexedSlices.
        grads = [None if g is None else tf.convert_to_tensor(g) for g in grads]
        first = 0 if part is Pass.WEIGHT_BACKWARD else len(watched)
        if part is not Pass.INPUT_BACKWARD:
            for index, (total, grad) in enumerate(zip(self._sums, grads[first:], strict=True)):
                if grad is None:
                    self._unread.add(index)
                else:
                    total.assign_add(grad)
        grads = [
            *_zero_filled(grads[:first], watched[:first]),
            *(g for g in grads[first:] if g is not None),
        ]
        with tf.control_dependencies(grads):
            for variable, value in zip(self._state, now, strict=True):
                variable.assign(value)  # statistics as the forwards left them: updated once
        return grads[:first]

    def _forward_backward_body(
        self, inputs: list[tf.Tensor], y: Any, update: bool
    ) -> tuple[list[tf.Tensor], tf.Tensor]:
        """The received tensors' gradients and the loss share; the variables' gradients summed,
        and with `update` applied and the sums cleared."""
        stage = self.stage
        by_name = dict(zip(stage.cut.received, inputs, strict=True))
        watched = [by_name[n] for n in _differentiated(stage, by_name, self.loss_fn)]
        with tf.GradientTape() as tape:
            tape.watch(watched)
            loss, _ = self._run(inputs, y)
        grads = tape.gradient(loss, [*watched, *stage.variables])
        grads = [None if g is None else tf.convert_to_tensor(g) for g in grads]
        for index, (total, grad) in enumerate(zip(self._sums, grads[len(watched) :], strict=True)):
            if grad is None:
                self._unread.add(index)
            else:
                total.assign_add(grad)
        if update:
            self._apply_body()
        return _zero_filled(grads[: len(watched)], watched), loss

    def _steps_body(self, read: Any, count: int) -> tf.Tensor:
        """Each step in turn, its update before the next step's forward."""
        losses = []
        for _ in range(count):
            received, y = read()
            inputs = [received[n] for n in self.stage.cut.received]
            losses.append(self._forward_backward_body(inputs, y, update=True)[1])
        return tf.stack(losses)

    def _apply_body(self) -> None:
        totals = [total.read_value() for total in self._sums]
        self.stage.optimizer.apply_gradients(_updated(totals, self.stage.variables, self._unread))
        with tf.control_dependencies(totals):
            self._reset_body()  # the next step's sums start from zero

    def _reset_body(self) -> None:
        for total in self._sums:
            total.assign(tf.zeros_like(total))


def _differentiated(stage: Stage, received: dict[str, tf.Tensor], loss_fn: Any) -> list[str]:
    """The received tensors a backward differentiates: those the stage's layers read, and, on
    the last stage, those it passes straight into the loss (a model output made by an earlier
    stage, such as one head of a two-output model). Integer tensors have no gradient."""
    if stage.index == 0:  # its inputs are the data: nothing upstream wants their gradient
        return []
    wanted = set(stage.cut.used)
    if loss_fn is not None:
        wanted |= set(stage.cut.passed_through)
    return [n for n in stage.cut.received if n in wanted and received[n].dtype.is_floating]


def _own_losses(stage: Stage) -> tf.Tensor | None:
    """The losses the stage's layers added in the call just made, and its weights'
    regularization, summed; None when it has none."""
    losses = stage.model.losses
    return tf.add_n([tf.cast(loss, tf.float32) for loss in losses]) if losses else None


def _with_own(loss: tf.Tensor, own: tf.Tensor | None) -> tf.Tensor:
    return loss if own is None else loss + tf.cast(own, loss.dtype)


def _zero_filled(grads: list[Any], sources: list[tf.Tensor]) -> list[tf.Tensor]:
    """The received tensors' gradients, zero for one the stage's forward never reads.

    Asked of the tape rather than with `unconnected_gradients=ZERO`, which would make zeros for
    the unread variables too, from a Keras variable's dtype, a string TensorFlow cannot read.
    """
    return [tf.zeros_like(s) if g is None else g for g, s in zip(grads, sources, strict=True)]


def _updated(grads: list[Any], variables: list, unread: set[int]) -> list[tuple[Any, Any]]:
    """(gradient, variable) for every variable the forward reads, as the optimizer takes them."""
    return [
        (g, v) for i, (g, v) in enumerate(zip(grads, variables, strict=True)) if i not in unread
    ]


def _received_gradients(
    stage: Stage, by_name: dict[str, tf.Tensor], upstream: dict[str, tf.Tensor]
) -> dict[str, tf.Tensor]:
    """The gradient of each received tensor: from the stage's own layers, plus the upstream
    gradient of a tensor it passed through unchanged. Integer tensors get none."""
    answer: dict[str, tf.Tensor] = {}
    for name in stage.cut.received:
        total = by_name.get(name)
        if name in stage.cut.passed_through and name in upstream:
            total = upstream[name] if total is None else total + upstream[name]
        if total is not None:
            answer[name] = total
    return answer


def stage_tasks(
    stages: list[Stage], loss_fn: LossFn, micro_batches: int, recompute: bool, split: bool
) -> list[EagerTasks | CompiledTasks]:
    """Each stage's tasks; `loss_fn`, (targets, the last stage's outputs by name) -> the
    micro-batch's mean loss, goes to the last stage."""
    last = len(stages) - 1
    return [
        make_tasks(s, loss_fn if s.index == last else None, micro_batches, recompute, split)
        for s in stages
    ]


def make_tasks(
    stage: Stage, loss_fn: LossFn | None, micro_batches: int, recompute: bool, split: bool
):
    """The stage's tasks: compiled with recompute, or eager with the tape kept; `split` when
    the schedule has separate weight-gradient tasks."""
    kind = CompiledTasks if recompute else EagerTasks
    return kind(stage, loss_fn, micro_batches, split)


def split(batch: Any, parts: int) -> list[Any]:
    """A batch (a tensor, or a tuple or dict of them) as `parts` micro-batches."""
    if parts == 1:
        return [batch]
    flat = [tf.split(tensor, parts) for tensor in tf.nest.flatten(batch)]
    return [tf.nest.pack_sequence_as(batch, [pieces[i] for pieces in flat]) for i in range(parts)]


def front(batch: Any, size: int) -> Any:
    """The first `size` samples of a batch (a tensor, or a tuple or dict of them)."""
    return tf.nest.map_structure(lambda tensor: tensor[:size], batch)


def nbytes(tensors: dict[str, tf.Tensor]) -> int:
    return sum(int(t.shape.num_elements() or 0) * t.dtype.size for t in tensors.values())


def wait_for(values: Any) -> None:
    """Until every GPU tensor in `values` (any nesting) is computed; CPU ops are done when they
    return."""
    for tensor in tf.nest.flatten(values):
        if not isinstance(tensor, tf.Tensor | tf.Variable) and hasattr(tensor, "value"):
            tensor = tensor.value  # a Keras variable: its TensorFlow variable
        if isinstance(tensor, tf.Tensor | tf.Variable) and "GPU" in tensor.device:
            if tensor.shape.rank:
                tensor[..., :1].numpy()  # a slice is enough: it waits for the whole tensor
            else:
                tensor.numpy()
