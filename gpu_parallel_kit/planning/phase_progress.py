"""A short child's progress: a bar of elapsed time and the phase it is in, where a line can be
redrawn (a notebook's widget, a terminal), else a line when it starts and one when it ends.

Used by the plan search's count (`step_count.py`) and by the calibration
(`calibration_probe.py`, `predicted_rows.py`).
"""

from __future__ import annotations

import sys
import time

from ..runs.processes.progress_bars import in_widget


class PhaseProgress:
    """Progress of `text`; `ended` is the closing line's verb ("Counted", "Calibrated")."""

    def __init__(self, text: str, enabled: bool, ended: str) -> None:
        self._bar, self._started, self._lines, self._ended = None, time.monotonic(), False, ended
        if enabled and (in_widget() or sys.stdout.isatty()):
            from tqdm.auto import tqdm

            self._bar = tqdm(total=None, desc=text, bar_format="{desc}: {elapsed} {postfix}")
        elif enabled:
            print(text, flush=True)
            self._lines = True

    def phase(self, text: str) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(text)

    def tick(self) -> None:
        if self._bar is not None:
            self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._lines:
            print(f"{self._ended} in {time.monotonic() - self._started:.0f} s", flush=True)
            self._lines = False
