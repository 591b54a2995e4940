"""A model as the graph of its layer calls, and where it can be cut into pipeline stages.

Real models are graphs, not chains: a residual stream, a branch or a U-Net's long skip carries a
tensor past several layers. Put the calls in a topological order; every position between two
calls is a candidate cut, and what crosses it is every tensor produced before it and used after
it (or returned by the model). A chain sends one tensor over each cut; a residual block sends the
stream it adds back into; a long skip rides through every stage between its two ends.

Plain data only (names of calls and tensors, numbers), so the rules are tested on literal graphs;
`worker/tensorflow/pipeline/stages.py` reads the graph off a Keras model and builds the stages.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import GpkError
from .partition import bottleneck, check_splittable


@dataclass(frozen=True)
class Call:
    """One layer call: the tensors it reads and the tensors it makes, by name."""

    name: str  # the layer's name
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class LayerGraph:
    """The calls of a model in a topological order, its input and its output tensors.

    >>> g = LayerGraph.ordered([Call("b", ("a",), ("b",)), Call("c", ("a", "b"), ("c",))],
    ...                        sources=("a",), sinks=("c",))
    >>> g.crossing(1)
    ('a', 'b')
    """

    calls: tuple[Call, ...]
    sources: tuple[str, ...]  # the model's input tensors
    sinks: tuple[str, ...]  # the model's output tensors

    @classmethod
    def ordered(
        cls, calls: Sequence[Call], sources: Sequence[str], sinks: Sequence[str]
    ) -> LayerGraph:
        """The same calls in a topological order that keeps the given order where it can."""
        producer: dict[str, int] = {}
        for position, call in enumerate(calls):
            for tensor in call.outputs:
                producer[tensor] = position
        known = set(sources) | set(producer)
        for call in calls:
            missing = [t for t in call.inputs if t not in known]
            if missing:
                raise GpkError(f"layer {call.name!r} reads {missing[0]!r}, which nothing makes")
        waiting = [len({producer[t] for t in call.inputs if t in producer}) for call in calls]
        readers: dict[int, set[int]] = {}
        for position, call in enumerate(calls):
            for tensor in call.inputs:
                if tensor in producer:
                    readers.setdefault(producer[tensor], set()).add(position)
        ready = [position for position, count in enumerate(waiting) if count == 0]
        heapq.heapify(ready)
        order: list[int] = []
        while ready:
            position = heapq.heappop(ready)
            order.append(position)
            for reader in sorted(readers.get(position, ())):
                waiting[reader] -= 1
                if waiting[reader] == 0:
                    heapq.heappush(ready, reader)
        if len(order) != len(calls):
            raise GpkError("the model's layers form a loop; a model graph must be acyclic")
        return cls(tuple(calls[p] for p in order), tuple(sources), tuple(sinks))

    def crossing(self, position: int) -> tuple[str, ...]:
        """The tensors alive between calls[position - 1] and calls[position]: made before (or
        model inputs) and read at or after it, or returned by the model. Position 0 is the
        model's inputs, position len(calls) its outputs."""
        made_before = [*self.sources]
        for call in self.calls[:position]:
            made_before.extend(call.outputs)
        needed = set(self.sinks)
        for call in self.calls[position:]:
            needed.update(call.inputs)
        return tuple(dict.fromkeys(t for t in made_before if t in needed))

    def stage(self, start: int, end: int) -> StageCut:
        """What the stage of calls[start:end] receives, computes and sends on."""
        received = self.crossing(start)
        sent = self.crossing(end)
        calls = self.calls[start:end]
        read = {t for call in calls for t in call.inputs}
        return StageCut(
            calls=tuple(call.name for call in calls),
            received=received,
            used=tuple(t for t in received if t in read),
            computed=tuple(t for t in sent if t not in received),
            passed_through=tuple(t for t in sent if t in received),
            sent=sent,
        )


@dataclass(frozen=True)
class StageCut:
    """One stage's share of the graph, as tensor names."""

    calls: tuple[str, ...]  # the layers it runs, in order
    received: tuple[str, ...]  # every tensor crossing into it
    used: tuple[str, ...]  # the received tensors its layers read: its sub-model's inputs
    computed: tuple[str, ...]  # what its layers make that later stages need: its outputs
    passed_through: tuple[str, ...]  # received and sent on unchanged (a long skip)
    sent: tuple[str, ...]  # every tensor crossing out of it: computed and passed through


def cut_positions(
    costs: Sequence[float],
    crossing_bytes: Sequence[float],
    stages: int,
    slack: float = 0.1,
) -> list[int]:
    """The positions (1 .. len(costs) - 1) where stages 1 .. K-1 start.

    First the balance rule: the smallest achievable cost of the costliest stage (parameters or
    measured time, as for chains). Then, among the splits whose costliest stage is within
    `slack` of it, the one that sends the fewest bytes across its cuts; ties go to the most even
    costs. `crossing_bytes[p]` is what crosses a cut before call p (index 0 unused).

    >>> cut_positions([1, 1, 1, 1], [0, 8, 1, 8], 2)
    [2]
    """
    check_splittable(len(costs), stages)
    if len(crossing_bytes) != len(costs):
        raise ValueError("crossing_bytes needs one entry per call")
    scale = 1e6 / max(sum(costs), 1e-12)
    exact = [max(1, round(c * scale)) for c in costs]
    limit = bottleneck(exact, stages) * (1.0 + slack)
    prefix = [0]
    for value in exact:
        prefix.append(prefix[-1] + value)
    n = len(exact)
    # best[j]: (bytes sent so far, sorted stage costs) of the best split of the first j calls.
    best: dict[int, tuple[float, tuple[int, ...], tuple[int, ...]]] = {0: (0.0, (), ())}
    for k in range(1, stages + 1):
        following: dict[int, tuple[float, tuple[int, ...], tuple[int, ...]]] = {}
        for j in range(k, n - (stages - k) + 1):
            options = []
            for i, (sent, stage_costs, starts) in best.items():
                cost = prefix[j] - prefix[i]
                if i >= j or cost > limit:
                    continue
                added = crossing_bytes[i] if i > 0 else 0.0
                new_costs = tuple(sorted((*stage_costs, cost), reverse=True))
                options.append((sent + added, new_costs, (*starts, i) if i > 0 else starts))
            if options:
                following[j] = min(options)
        best = following
    if n not in best:
        raise GpkError(f"no split of {n} layers into {stages} stages fits the balance rule")
    return list(best[n][2])


def positions_from_names(graph: LayerGraph, names: Sequence[str], stages: int) -> list[int]:
    """`balance=["conv4_block1_out", ...]`: the layers where stages 1 .. K-1 begin."""
    where = {call.name: position for position, call in enumerate(graph.calls)}
    if len(names) != stages - 1:
        raise GpkError(
            f"balance names {len(names)} layers where stages begin; {stages} stages need "
            f"{stages - 1}"
        )
    unknown = [name for name in names if name not in where]
    if unknown:
        raise GpkError(
            f"balance names layer {unknown[0]!r}, which the model does not have; name layers "
            f"such as {', '.join(repr(c.name) for c in graph.calls[1:4])}"
        )
    positions = [where[name] for name in names]
    if positions != sorted(set(positions)) or positions[0] == 0:
        raise GpkError(
            f"balance={list(names)} must name different layers in the model's order, after its "
            f"first layer {graph.calls[0].name!r}"
        )
    return positions
