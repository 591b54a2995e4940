"""Runs over several processes: the `workers` option, who takes it, and which part of each
batch a worker feeds.

`multiworker` always runs in processes of its own. On JAX, `data`, `fsdp` and `tensor` take
`workers=` and `cluster=` too (`Strategy.over_processes`): W local processes, or the hosts of a
named cluster, each with the run's devices, form one mesh through `jax.distributed`. `pipeline`
takes `workers=`: its stages spread over the processes' devices, each run by the process that
owns it, the cuts between processes crossed by a collective. A comparison passes `workers=` and
`cluster=` to `multiworker` rows only.

>>> exp.run(strategy="fsdp", devices=1, workers=2, backend="jax")
>>> exp.run(strategy="pipeline", devices=1, workers=2, micro_batches=4, backend="jax")
>>> exp.run(strategy="fsdp", devices=1, cluster="cluster.json", backend="jax")
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import GpkError, whole_number
from .option import Option, positive

if TYPE_CHECKING:
    from .record import Strategy

WORKERS = Option(
    "workers",
    positive,
    None,
    "worker processes started on this machine, each with the run's devices (on JAX one mesh "
    "over all of them); default: 1, 2 for multiworker, or the cluster's count with cluster",
    metavar="W",
    absent=1,
)
CLUSTER = Option(
    "cluster",
    str,
    None,
    'a JSON file {"worker": ["host1:23456", ...], "coordinator": "host0:23400"} naming the '
    "hosts, where `gpk worker` runs; or slurm:nodes=2,partition=gpu,time=00:30:00 to run every "
    "row as a step of one Slurm allocation; default: local workers",
    metavar="FILE",
)
# The options a comparison gives only to the strategies that always run in processes.
PROCESS_OPTIONS = ("workers", "cluster")


def workers_option(options: Mapping[str, Any]) -> dict[str, Any]:
    """`workers` as a run holds it: 1 unless given, or the count of a named cluster (already
    loaded by the caller), which the run then holds too."""
    workers, cluster = options.get("workers"), options.get("cluster")
    if cluster is not None:
        return {"workers": len(cluster.workers) if workers is None else workers, "cluster": cluster}
    return {"workers": 1 if workers is None else workers}


def for_comparison(record: Strategy, options: Mapping[str, Any]) -> dict[str, Any]:
    """A comparison's options as one of its rows takes them: `workers=` and `cluster=` apply to
    the strategies that always run in processes, the others run in one."""
    if record.processes:
        return dict(options)
    return {name: value for name, value in options.items() if name not in PROCESS_OPTIONS}


def check_workers(record: Strategy, backend: str, workers: Any, cluster: Any = None) -> None:
    """`workers=` (or `cluster=`) where the strategy spreads over processes on this backend;
    else one sentence."""
    if cluster is not None and not record.processes:
        _check_cluster(record, backend, workers, cluster)
    if workers is None or workers == 1 or record.processes:
        return
    whole_number(workers, "workers", hint="e.g. 2")
    if backend in record.over_processes:
        return
    takers = sorted(record.over_processes)
    if takers:
        raise GpkError(
            f"workers={workers} spreads strategy={record.name!r} over processes on "
            f"backend={takers[0]!r}; use it there, or strategy='multiworker' on "
            f"backend={backend!r}"
        )
    raise GpkError(
        f"strategy={record.name!r} does not run over several processes (workers={workers}); "
        "drop workers=, or use 'data', 'fsdp', 'tensor' or 'pipeline' with backend='jax'"
    )


def _check_cluster(record: Strategy, backend: str, workers: Any, cluster: Any) -> None:
    takers = sorted(record.over_processes)
    if not takers or CLUSTER not in record.options:  # pipeline: local workers only, so far
        raise GpkError(
            f"strategy={record.name!r} does not run over several hosts (cluster=); drop "
            "cluster=, or use 'multiworker', or 'data', 'fsdp' or 'tensor' with backend='jax'"
        )
    if backend not in record.over_processes:
        raise GpkError(
            f"cluster= spreads strategy={record.name!r} over hosts on backend={takers[0]!r}; "
            f"use it there, or strategy='multiworker' on backend={backend!r}"
        )
    if workers is not None and workers != len(cluster.workers):
        raise GpkError(
            f"workers={workers} but the cluster {cluster.source or ''} lists "
            f"{len(cluster.workers)}; drop workers= or make them agree"
        )


@dataclass(frozen=True)
class ProcessShare:
    """The part of each global batch one worker feeds: its rows, and, with a context axis, the
    chunks of each sequence its devices hold (`chunks` of `context` equal chunks)."""

    rows: slice
    chunks: range = range(1)
    context: int = 1

    def positions(self, length: int) -> slice:
        """The positions of a sequence of `length` this worker feeds."""
        chunk = length // self.context
        return slice(self.chunks.start * chunk, self.chunks.stop * chunk)

    @property
    def whole_sequences(self) -> bool:
        """Whether the worker feeds every position of each sequence."""
        return len(self.chunks) == self.context


def process_share(
    global_batch: int, devices: int, data: int, workers: int, index: int, context: int = 1
) -> ProcessShare:
    """What worker `index` feeds of each global batch: the rows of the data-axis positions its
    devices hold, on a (data ÷ context, context, devices ÷ data) mesh laid out in worker order,
    and of each sequence the context positions they hold (`data` counts the context axis in).

    >>> process_share(8, devices=4, data=4, workers=2, index=1).rows
    slice(4, 8, None)
    >>> process_share(8, devices=4, data=1, workers=2, index=1).rows  # the batch replicated
    slice(0, 8, None)
    >>> process_share(8, devices=2, data=2, workers=2, index=1, context=2).chunks
    range(1, 2)
    """
    model = devices // data
    local = devices // workers
    row = context * model  # the devices of one data-axis position
    if context > 1 and local % row and row % local:
        raise GpkError(
            f"context={context} over {workers} workers of {local} devices each would give a "
            f"worker part of a sequence in some rows and all of it in others; give each worker "
            f"a multiple or a divisor of {row} devices (context × model axis)"
        )
    first, last = (index * local) // row, ((index + 1) * local - 1) // row
    share = global_batch // (data // context)
    rows = slice(first * share, (last + 1) * share)
    if local >= row:
        return ProcessShare(rows, range(context), context)
    start = (index * local // model) % context
    end = ((index + 1) * local - 1) // model % context + 1
    return ProcessShare(rows, range(start, end), context)
