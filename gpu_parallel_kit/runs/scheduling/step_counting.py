"""Counting a step's work, caller side: the key a count is stored under, and the short child
that counts (`worker/work_count.py`), on the JAX server when JAX is installed, else on the
TensorFlow fork server. Only a projection asks for it, so it never adds to a run's cost."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ...strategies import SINGLE
from ..description.device_choice import PhysicalDevice, plan_devices
from ..description.nested_arrays import width
from ..description.run_spec import RunSpec
from ..description.sources import array_structures
from ..description.synthetic_data import synthetic_spec
from ..processes.entry_points import WORK_COUNT_JAX_ENTRY, WORK_COUNT_TF_ENTRY
from . import training_gate
from .comparison_rounds import new_run_id

COUNT_TIMEOUT_S = 600.0  # compiling a ResNet-50's step twice, and its layers, on 2 cores


class CountBatches(NamedTuple):
    """The two batch sizes a count compiles; the difference of their counts splits the work per
    sample from the work per step."""

    small: int  # the run's batch, capped at 64 (compiling memory)
    large: int  # twice that


def count_batches(global_batch: int) -> CountBatches:
    """The two batch sizes a count compiles: the run's batch capped at 64 (compiling memory),
    and twice that; the difference splits the work per sample from the work per step."""
    first = max(1, min(int(global_batch), 64))
    return CountBatches(first, 2 * first)


def count_spec(experiment_id: str, model: Any, data: Any, training: Any, backend: str) -> RunSpec:
    """The run a count compiles: the experiment's model, data and training on one device.

    A count compiles in a child of its own and reads nothing of the plan's devices, so its spec
    is planned on a stand-in CPU device: it never waits for device discovery, and can start
    beside the servers' start (`CountAhead`)."""
    host = PhysicalDevice(name="/physical_device:CPU:0", kind="cpu", index=0)
    return RunSpec(
        run_id=new_run_id(),
        experiment_id=experiment_id,
        strategy=SINGLE.name,
        devices=plan_devices(1, physical=(host,), backend=backend),
        model=model,
        data=data,
        training=training,
        backend=backend,
    )


def work_key(spec: RunSpec, batches: CountBatches) -> str:
    """What a count depends on: the model, the input shape and dtype, the loss and optimizer
    asked, and the two batch sizes counted."""
    digest = hashlib.sha256()
    model = spec.model
    for part in (model.kind, model.name, _inputs(spec), repr(spec.training.optimizer)):
        digest.update(str(part).encode())
        digest.update(b"\0")
    digest.update(model.payload)
    digest.update(repr(spec.training.loss).encode())
    digest.update(repr(tuple(batches)).encode())  # the key stored counts were saved under
    return digest.hexdigest()[:32]


def _inputs(spec: RunSpec) -> str:
    data = spec.data
    if data.kind == "synthetic":
        shape = synthetic_spec(data.name)
        return f"{data.name}{shape.input_shape}"
    if data.kind == "arrays":
        inputs = width(array_structures(data)[0])
        loaded = [np.load(path, mmap_mode="r") for path in data.paths[:inputs]]
        return f"{array_structures(data)[0]}" + "".join(f"{x.shape[1:]}{x.dtype}" for x in loaded)
    return f"{data.name}:{hashlib.sha256(data.payload).hexdigest()[:16]}"


def count_in_child(spec: RunSpec, batches: CountBatches) -> dict[str, Any]:
    """The counting child's answer (a dict for `analysis.cost_model.counted_work.from_counts`);
    RuntimeError with one sentence when neither backend could count the step."""
    from ..processes.child_process import start_child, stop_child

    failures = []
    for entry, backend in ((WORK_COUNT_JAX_ENTRY, "jax"), (WORK_COUNT_TF_ENTRY, "tensorflow")):
        try:
            process, receiver = start_child(entry, spec, batches, backend=backend)
        except RuntimeError as error:  # e.g. JAX not installed: the JAX server ends at once
            failures.append(f"{backend}: {error}")
            continue
        try:
            if not receiver.poll(COUNT_TIMEOUT_S):
                failures.append(f"{backend}: no answer within {COUNT_TIMEOUT_S:g} s")
                continue
            succeeded, answer = receiver.recv()
        except EOFError:
            failures.append(f"{backend}: the counting process ended without answering")
            continue
        finally:
            receiver.close()
            stop_child(process)
        if succeeded:
            return answer
        failures.append(f"{backend}: {answer}")
    raise RuntimeError("the step could not be counted (" + "; ".join(failures) + ")")


class CountAhead:
    """A step counted in the background while a comparison starts, for the projection after it.

    The count is a child that compiles the step (5.9-7.7 s for the demo's MLP on two cores, a
    JAX server's start included when the comparison runs on TensorFlow). Started ahead, it runs
    beside the servers' start, device discovery and the first runs' set-up, none of which is
    timed; the caller holds a share of its training gate meanwhile
    (`runs/scheduling/training_gate.py`), so no run times a step while the count computes. A failed
    count says nothing here: the projection counts again and says why.
    """

    def __init__(self, count: Callable[[], Any]) -> None:
        self._give_back = training_gate.hold_in_caller()  # before any run could pass the gate
        self._thread = threading.Thread(
            target=self._count, args=(count,), daemon=True, name="gpk-count-ahead"
        )
        self._thread.start()

    def _count(self, count: Callable[[], Any]) -> None:
        try:
            count()
        except Exception:  # noqa: BLE001, S110 - the projection's own count says why
            pass
        finally:
            self._give_back()

    def wait(self) -> None:
        self._thread.join()
