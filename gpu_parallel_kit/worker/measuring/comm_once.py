"""A run's communication figures, measured once per configuration, on both backends.

A comparison's later round of a configuration reuses the figures an earlier round measured
(`RunSpec.comm_from`); otherwise the backend's measurement is prepared (a run whose training
never began compiles it now) and timed. A measurement that raises costs the run only its
communication figures: its traceback goes to the worker's stderr and the row says it was not
measured.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any


def communication_once(
    comm_from: Any, prepare: Callable[[], Callable[[], dict[str, Any]] | None]
) -> tuple[dict[str, Any] | None, bool]:
    """(the figures, whether measuring failed): `comm_from`'s figures where an earlier round
    measured them, else those of the timing `prepare()` returns (None: nothing to measure)."""
    if comm_from is not None:
        return comm_from.as_dict(), False
    timing = prepare()
    if timing is None:
        return None, False
    try:
        return timing(), False
    except Exception:  # noqa: BLE001 - a measurement must not cost the run its results
        traceback.print_exc()
        return None, True
