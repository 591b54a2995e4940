"""Communication measured once per configuration of a comparison, not once per round.

The after-training communication measurement (tracing or compiling the step with and without
its collectives, then timing them) is most of a run's fixed cost. Every round of a configuration
runs the same model, strategy, devices and batch, so the collectives it measures are the same:
the first round that measured them lends its figures to the configuration's later rounds,
which skip the measurement. Each such row names the run that measured them
(`extra["comm_measured_in"]`) and says so in its `comm_method`; its `comm_share` is still taken
against its own step time. A configuration whose next round follows it directly (a comparison
of one configuration) measures in every round: that round starts before the last has measured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..results.run_result import RunResult
    from .run_spec import RunSpec

# What a measurement returns besides `comm_time_s`, as the rows keep it in `extra`.
EXTRA_FIGURES = (
    "comm_noise_s",
    "standalone_all_reduce_s",
    "standalone_collectives_s",
    "step_without_all_reduce_s",
    "step_with_all_reduce_s",
)


@dataclasses.dataclass(frozen=True)
class MeasuredComm:
    """Figures one run measured, for the later rounds of its configuration."""

    run_id: str
    method: str
    figures: tuple[tuple[str, float], ...]

    def as_dict(self) -> dict[str, float]:
        """The figures as the measurement returned them (`comm_time_s` among them)."""
        return dict(self.figures)

    def describe(self) -> str:
        """The reusing row's `comm_method`: how the figures were taken, and where."""
        return f"{self.method}; measured once for this configuration, in its run {self.run_id}"


def measured_in(rows: Sequence[RunResult]) -> MeasuredComm | None:
    """The communication an earlier round of the configuration measured itself, or None."""
    for row in rows:
        # A figure below its noise was moved aside, signed (runs/results/below_noise.py); it is lent
        # as taken.
        taken = row.extra.get("comm_time_raw_s", row.comm_time_s)
        measured = taken is not None and "comm_measured_in" not in row.extra
        if not (row.ok and measured and "comm_method" in row.extra):
            continue
        figures = {"comm_time_s": float(taken)}
        figures.update({k: float(row.extra[k]) for k in EXTRA_FIGURES if k in row.extra})
        return MeasuredComm(row.run_id, str(row.extra["comm_method"]), tuple(figures.items()))
    return None


def reusing(spec: RunSpec, rows: Sequence[RunResult]) -> RunSpec:
    """`spec` with the figures an earlier round of its configuration measured, if any."""
    if not spec.measure_comm or spec.comm_from is not None:
        return spec
    measured = measured_in(rows)
    return spec if measured is None else dataclasses.replace(spec, comm_from=measured)


def reuse_fields(measured: MeasuredComm) -> dict[str, Any]:
    """What a reusing row adds to its `extra`, beside the figures themselves."""
    return {"comm_measured_in": measured.run_id, "comm_method": measured.describe()}
