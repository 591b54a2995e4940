"""The cuts of a JAX pipeline whose two stages live in different processes, crossed as a
collective.

Within a process a cut is a `jax.device_put`. Between processes it is a jitted `shard_map` over
a mesh of two devices, the sender's and the receiver's, whose `jax.lax.ppermute` moves shard 0
to shard 1: each process supplies its own shard (`jax.make_array_from_single_device_arrays`),
the sender the tensors, the receiver zeros of their shapes, and the receiver keeps its shard of
the result. It is the route JAX takes between hosts too (gloo on CPUs, NCCL on GPUs).

Every process must issue the same collectives in the same order. One thread per process issues
all of its step's crossings, in the order of one serial execution of the whole schedule
(`pipeline.checks.execution_order`), the same list in every process; each crossing waits for its
sender's task, and every task waits only on crossings earlier in that order, so none waits for
ever. The device threads are unchanged: a crossing takes from the mailbox what the sending
stage put there, and puts what it receives where the receiving stage looks.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import keras
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ....errors import GpkError
from ....pipeline.checks import execution_order
from ....pipeline.schedules import Schedule, device_of
from ....pipeline.tasks import Carried, MailboxKey, Task
from ...pipeline.runner_messages import Mailbox

CUT_AXIS = "cut"


@dataclass(frozen=True)
class Crossing:
    """One message over a cut between processes: its mailbox key (what it carries, the stage it
    goes to, the micro-batch), the two devices, and the tensors' names, shapes and dtypes."""

    key: MailboxKey
    sender: Any
    receiver: Any
    tensors: tuple[tuple[str, tuple[int, ...], str], ...]


class ProcessCrossings:
    """Every crossing of one step, in the order all processes issue them.

    Args:
        stages: every stage (those of other processes too), each with `index`, `device`,
            `cut` and, for gradients, `floating`.
        schedule: each device's tasks.
        traced: the model's graph: the shapes and dtypes of what crosses.
        rows: samples in one micro-batch.
    """

    def __init__(self, stages: list[Any], schedule: Schedule, traced: Any, rows: int) -> None:
        self.here = jax.process_index()
        devices = len(schedule)
        owner = [s.device for s in stages]
        # The schedule's device columns this process runs: those of its own stages.
        self.local_devices = sorted(
            {device_of(s.index, devices) for s in stages if s.device.process_index == self.here}
        )
        self.after: dict[Task, list[Crossing]] = {}  # by the sending task
        self.order: list[Crossing] = []
        for task in execution_order(schedule, len(stages)):
            message = task.sent(len(stages))
            if message is None:
                continue
            cut = stages[message.cut].cut
            if message.carried is Carried.ACTIVATIONS:
                names = cut.sent
            else:
                names = tuple(n for n in cut.sent if n in stages[message.cut].floating)
            sender, receiver = owner[message.sender], owner[message.receiver]
            if sender.process_index == receiver.process_index:
                continue
            crossing = Crossing(message.key, sender, receiver, _tensors(traced, names, rows))
            self.order.append(crossing)
            self.after.setdefault(task, []).append(crossing)
        self._programs: dict[tuple[Any, Any], Any] = {}

    def involves(self, crossing: Crossing) -> bool:
        return self.here in (crossing.sender.process_index, crossing.receiver.process_index)

    def run(self, mailbox: Mailbox) -> None:
        """All of a step's crossings, in order (the crossings' thread)."""
        for crossing in self.order:
            if self.involves(crossing):
                self.cross(crossing, mailbox)

    def cross_after(self, task: Task, mailbox: Mailbox) -> None:
        """The crossings `task` sends, where this process takes part (one task at a time)."""
        for crossing in self.after.get(task, ()):
            if self.involves(crossing):
                self.cross(crossing, mailbox)

    def cross(self, crossing: Crossing, mailbox: Mailbox) -> None:
        """One crossing: the sender's tensors from the mailbox into the receiver's."""
        mesh, program = self._program(crossing.sender, crossing.receiver)
        sending = crossing.sender.process_index == self.here
        given = mailbox.get(crossing.key) if sending else {}
        local = crossing.sender if sending else crossing.receiver
        sharding = NamedSharding(mesh, PartitionSpec(CUT_AXIS))
        shards = {}
        for name, shape, dtype in crossing.tensors:
            if sending and name in given:
                piece = jax.device_put(given[name], local)[None]
            else:  # the receiver's buffer; a gradient the sender has none of is zero
                piece = jnp.zeros((1, *shape), dtype, device=local)
            shards[name] = jax.make_array_from_single_device_arrays((2, *shape), sharding, [piece])
        moved = program(shards)
        if not sending:
            mailbox.put(
                crossing.key, {n: a.addressable_shards[0].data[0] for n, a in moved.items()}
            )

    def _program(self, sender: Any, receiver: Any) -> tuple[Mesh, Any]:
        pair = (sender, receiver)
        if pair not in self._programs:
            mesh = Mesh(np.array([sender, receiver], dtype=object), (CUT_AXIS,))

            def move(tree: dict[str, Any]) -> dict[str, Any]:
                return jax.tree.map(lambda a: jax.lax.ppermute(a, CUT_AXIS, [(0, 1)]), tree)

            spec = PartitionSpec(CUT_AXIS)
            program = jax.jit(jax.shard_map(move, mesh=mesh, in_specs=spec, out_specs=spec))
            self._programs[pair] = (mesh, program)
        return self._programs[pair]

    def start(self, mailbox: Mailbox) -> threading.Thread:
        """The crossings' thread for one step; a failure aborts the device threads' waits."""
        failure: list[BaseException] = []

        def run() -> None:
            try:
                self.run(mailbox)
            except BaseException as error:  # noqa: BLE001 - raised again by `finish`
                failure.append(error)
                mailbox.abort()

        thread = threading.Thread(target=run, name="gpk-crossings", daemon=True)
        thread.failure = failure  # type: ignore[attr-defined]
        thread.start()
        return thread

    @staticmethod
    def finish(thread: threading.Thread) -> None:
        thread.join()
        if thread.failure:  # type: ignore[attr-defined]
            raise thread.failure[0]  # type: ignore[attr-defined]

    def total_loss(self, loss: float) -> float:
        """The step's loss, in every process: each process's share summed (the last stage's
        loss, and the losses its other stages' layers added), by one all-gather when every
        process's crossings are done."""
        return float(np.sum(multihost_utils.process_allgather(np.float64(loss))))


def _tensors(traced: Any, names: tuple[str, ...], rows: int) -> tuple:
    """(name, shape of one micro-batch, dtype) of each tensor, from the traced graph."""
    found = []
    for name in names:
        tensor = traced.tensors[name]
        if None in tensor.shape[1:]:  # the receiver's buffer is made before anything arrives
            raise GpkError(
                f"tensor {name!r} of shape {tuple(tensor.shape)} crosses between processes "
                "with a length known only at run time; give the model's inputs a fixed shape "
                "(keras.Input(shape=...)), or run the pipeline in one process"
            )
        shape = (rows, *tensor.shape[1:])
        found.append((name, shape, keras.backend.standardize_dtype(tensor.dtype)))
    return tuple(found)
