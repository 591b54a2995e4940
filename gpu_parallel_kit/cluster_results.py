"""One row from the results of a multi-worker run's workers: plain data, no TensorFlow.

The chief's result becomes the row (its step times are the run's, since every step waits for all
workers); the others add their memory and the digest of their final weights. When any worker
fails, the row names which one and why, preferring the cause (a killed or out-of-memory worker)
over its consequence (peers whose collectives then broke).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .results import RunResult

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
