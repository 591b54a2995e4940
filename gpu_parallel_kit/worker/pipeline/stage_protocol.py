"""What a backend gives the pipeline runner for one model stage, and what each of its passes
returns, as named values.

Tensors cross between stages as dicts by name. A forward returns what crosses out, its objective
and what its backward needs (`Forwarded`); a backward returns the gradients of what the stage
received and what its weight backward needs when the backward is split (`Backwarded`). A stage
that can run the last stage's forward and whole backward as one call, and a one-stage model's
steps several to a call, is a `FusingStage` too, and says so with `fuses`.

TensorFlow's stages are in `worker/tensorflow/pipeline/stage_calls.py`, JAX's in
`worker/jax/pipeline/stage_calls.py`; the runner is `schedule_runner.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from ...pipeline.tasks import Pass


class Forwarded(NamedTuple):
    """What a stage's forward of one micro-batch returns."""

    sent: Any  # what crosses out, by name (the last stage: its output)
    # the micro-batch's share of the loss on the last stage, or of the losses the stage's
    # layers add elsewhere; None when they add none
    objective: Any
    saved: Any  # what the backward needs


class Backwarded(NamedTuple):
    """What a stage's whole or input backward of one micro-batch returns."""

    sent: Any  # the gradients of what the stage received, by name, to send upstream
    for_weight: Any  # what the weight backward needs after an input backward; None otherwise


class FusedPasses(NamedTuple):
    """What the last stage's forward and whole backward, run as one call, return."""

    sent: Any  # the gradients of what the stage received, by name, to send upstream
    objective: Any


class PipelineStage(Protocol):
    """One model stage's calls, on its device, as the runner asks them."""

    index: int
    # offers the calls of a `FusingStage`: the last stage's passes in one call, and a one-stage
    # model's steps (forward, backward, update each), several in one call
    fuses: bool
    # its calls return once dispatched, before their work is done (JAX); False where a call
    # returns when its work is done (TensorFlow's eager executor)
    runs_ahead: bool

    def begin_step(self) -> None: ...

    def put(self, tensors: dict[str, Any]) -> dict[str, Any]: ...

    def labels(self, y: Any) -> Any: ...

    def forward(self, received: dict[str, Any], y: Any) -> Forwarded: ...

    def backward(self, saved: Any, upstream: dict[str, Any], y: Any, part: Pass) -> Backwarded: ...

    def weight_backward(self, later: Any) -> None: ...

    def apply(self) -> None: ...

    def gradients(self) -> Any: ...

    # what to wait for until the stage's last update is done; still valid after later calls
    def updated(self) -> Any: ...

    def wait(self, values: Any) -> None: ...

    def nbytes(self, tensors: dict[str, Any]) -> int: ...

    def snapshot(self) -> Any: ...

    def restore(self, state: Any) -> None: ...


class FusingStage(PipelineStage, Protocol):
    """A stage that also runs its passes fused into fewer calls (`fuses` is True)."""

    def forward_backward(self, received: dict[str, Any], y: Any, update: bool) -> FusedPasses: ...

    def whole_steps(self, read: Callable[[], tuple[dict[str, Any], Any]], count: int) -> Any: ...
