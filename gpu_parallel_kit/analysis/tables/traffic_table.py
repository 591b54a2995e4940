"""What each run moves between devices per step: one table, shown as it is and drawn as it is.

The bytes are counted, not measured: on JAX from the layout (`sharding/traffic.py`: ring counts
of the all-reduces, and the gathers and reduce-scatters of weights on the data axis), on
TensorFlow's data parallelism from its all-reduce, and for a pipeline from the activations and
their gradients that cross each cut. The sharding figure (`plots/sharding.py`) draws the
`per_device_bytes` column of this table, so the chart and the table beside it agree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from ...runs.results.run_result import RunResult
from ...strategies import has
from .cell_text import parse_number
from .readable_frame import RunFrame

TRAFFIC_COLUMNS: tuple[str, ...] = (
    "strategy",
    "backend",
    "devices",
    "mesh",
    "gathered_bytes",  # what the all-gathers deliver, forward and backward
    "scattered_bytes",  # what the reduce-scatters take in
    "comm_bytes",  # every collective's bytes, or everything sent across a pipeline's cuts
    "per_device_bytes",  # what the fullest device sends and receives per step
)
# Under the table, for its "—" cells.
NOT_DONE = (
    "—: not done by this strategy. Only a weight sharded over the data axis (fsdp) is gathered "
    "and reduce-scattered; a pipeline sends activations and their gradients across its cuts "
    "(comm, and per device those of the cuts beside the fullest device); one device moves nothing."
)


def traffic_rows(results: Sequence[RunResult]) -> list[RunResult]:
    """The runs a traffic table shows: finished, on more than one device, or the baseline (one
    device, nothing moved), which the memory it is compared with needs."""
    return [r for r in results if r.ok and (r.devices > 1 or has(r.strategy, "baseline"))]


def traffic_table(results: Sequence[RunResult]) -> RunFrame:
    """Bytes moved per step by each finished run of `results` (`traffic_rows`), one row each.

    The values are bytes (NaN where the strategy does no such thing); the display writes them
    in KiB or MiB, and "—" with a footnote (`NOT_DONE`) where a figure does not apply.

    Args:
        results: the runs, as `cmp.results` holds them.
    """
    rows = [
        {
            "strategy": r.strategy,
            "backend": r.backend,
            "devices": r.devices,
            "mesh": r.mesh,
            "gathered_bytes": parse_number(r.extra.get("all_gather_bytes")),
            "scattered_bytes": parse_number(r.extra.get("reduce_scatter_bytes")),
            "comm_bytes": parse_number(r.comm_bytes),
            "per_device_bytes": per_device_bytes(r),
        }
        for r in traffic_rows(results)
    ]
    frame = RunFrame(pd.DataFrame(rows, columns=list(TRAFFIC_COLUMNS)))
    frame.attrs["not_done"] = NOT_DONE
    return frame


def per_device_bytes(result: RunResult) -> float:
    """Bytes the fullest device sends and receives per step: the layout's or the all-reduce's
    ring count where the run has one, a pipeline's cuts beside the device, 0 on one device."""
    counted = result.extra.get("traffic_bytes_per_device")
    if counted is not None:
        return float(counted)
    if result.extra.get("cut_bytes"):
        return float(across_cuts(result.extra["cut_bytes"], result.extra.get("stages") or []))
    return 0.0 if result.devices <= 1 else math.nan


def across_cuts(cut_bytes: Sequence[int], stages: Sequence[dict]) -> int:
    """The most any device sends and receives across a pipeline's cuts: cut c joins stages c and
    c+1, and both devices move its bytes (activations one way, their gradients back).

    >>> across_cuts([100, 60], [{"device": "a"}, {"device": "b"}, {"device": "c"}])
    160
    """
    devices = [s.get("device") for s in stages]
    if len(devices) != len(cut_bytes) + 1:
        devices = list(range(len(cut_bytes) + 1))
    moved: dict[object, int] = {}
    for cut, nbytes in enumerate(cut_bytes):
        left, right = devices[cut], devices[cut + 1]
        if left == right:  # an interleaved chunk handing on to another chunk of its own device
            continue
        for device in (left, right):
            moved[device] = moved.get(device, 0) + int(nbytes)
    return max(moved.values(), default=0)
