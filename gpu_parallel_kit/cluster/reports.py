"""One row from what a multi-worker run's workers report: plain data, no TensorFlow.

The chief's result becomes the row (its step times are the run's, since every step waits for all
workers); the others add their memory and the digest of their final weights. When any worker
fails, the row names which one and why, preferring the cause (a killed or out-of-memory worker)
over its consequence (peers whose collectives then broke). `WorkerReports` is the policy both
launchers follow while the workers run, local processes and cluster hosts alike.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..runs.results.run_result import RunResult

FAILURE_GRACE_S = 1.0  # after a first failure, how long peers get to report their own cause


class WorkerReports:
    """What each worker has said so far: its phase, its result, and when to stop waiting.

    Events of the chief (worker 0) are relayed as the run's progress; a worker's result, or a row
    for one that ended without a result, is kept. Once a worker has failed, the others get
    FAILURE_GRACE_S to report their own cause, then `stragglers()` names them to be stopped.
    """

    def __init__(
        self, workers: int, identity: dict[str, Any], relay: Callable[[dict[str, Any]], None]
    ) -> None:
        self.workers = workers
        self.identity = identity  # the run's row fields, for rows of a worker's own
        self.relay = relay
        self.phases = dict.fromkeys(range(workers), "starting")
        self.results: dict[int, RunResult] = {}
        self._failed_at: float | None = None

    @property
    def pending(self) -> list[int]:
        return [i for i in range(self.workers) if i not in self.results]

    def handle(self, index: int, message: dict[str, Any]) -> None:
        """One message from worker `index`: its result, or an event."""
        if message.get("event") == "result":
            self.record(index, RunResult.from_dict(message["result"]))
            return
        if message.get("event") == "phase":
            self.phases[index] = message["phase"]
        if index == 0:
            self.relay(message)

    def ended(self, index: int, status: str, reason: str) -> None:
        """Worker `index` is gone without a result."""
        self.record(index, RunResult(**self.identity, status=status, reason=reason))

    def record(self, index: int, result: RunResult) -> None:
        self.results[index] = result
        if not result.ok and self._failed_at is None:
            self._failed_at = time.monotonic()

    def stragglers(self) -> list[int]:
        """Workers to stop now: the ones still running once a failure's grace has passed. Each
        gets a `cancelled` row saying so."""
        if self._failed_at is None or time.monotonic() - self._failed_at <= FAILURE_GRACE_S:
            return []
        stopped = self.pending
        for index in stopped:
            self.ended(
                index,
                "cancelled",
                f"stopped after another worker failed (was {self.phases[index]})",
            )
        return stopped

    def row(self) -> RunResult:
        return merge_worker_results(self.results, self.workers)


# Which failure explains a run best: a worker that died or ran out of memory breaks its peers'
# collectives, not the other way round.
_CAUSE_RANK = {"crashed": 0, "oom": 1, "timeout": 2, "failed": 3, "cancelled": 4}


def merge_worker_results(results: Mapping[int, RunResult], workers: int) -> RunResult:
    """The run's row from every worker's result (index -> result; all indices present)."""
    failures = [(i, r) for i, r in sorted(results.items()) if not r.ok]
    if failures:
        index, worst = min(failures, key=lambda item: (_CAUSE_RANK.get(item[1].status, 9), item[0]))
        return dataclasses.replace(
            worst,
            reason=f"worker {index} of {workers}: {worst.reason}",
            extra={**worst.extra, "failed_worker": index, "workers_detail": _details(results)},
        )
    chief = results[0]
    memory = {
        f"worker{i} {name}": value
        for i, result in sorted(results.items())
        for name, value in result.peak_memory_bytes.items()
    }
    names = tuple(
        f"worker{i} {name}" for i, result in sorted(results.items()) for name in result.device_names
    )
    return dataclasses.replace(
        chief,
        peak_memory_bytes=memory,
        device_names=names,
        extra={**chief.extra, "workers_detail": _details(results)},
    )


def _details(results: Mapping[int, RunResult]) -> list[dict[str, Any]]:
    return [
        {
            "worker": i,
            "status": r.status,
            "reason": r.reason,
            "step_time_s": r.step_time_s,
            "peak_memory_bytes": r.max_peak_memory_bytes,
            "weights_digest": r.extra.get("weights_digest"),
        }
        for i, r in sorted(results.items())
    ]
