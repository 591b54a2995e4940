"""A progress bar per run (tqdm.auto: a widget in notebooks, text in terminals)."""

from __future__ import annotations

from typing import Any

from tqdm.auto import tqdm

from .results import RunResult


class RunProgress:
    """Turns a worker's events into one bar: phase while starting, steps while training."""

    def __init__(self, label: str, enabled: bool = True) -> None:
        self.bar = tqdm(
            total=None, desc=label, unit="step", leave=True, disable=not enabled, dynamic_ncols=True
        )

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "phase":
            if event.get("total"):
                self.bar.reset(total=event["total"])
            self.bar.set_postfix_str(event["phase"], refresh=True)
        elif kind == "progress":
            self.bar.update(event["step"] - self.bar.n)
            self.bar.set_postfix_str(f"step {event['step_time_s'] * 1000:.1f} ms", refresh=False)

    def close(self, result: RunResult) -> None:
        if result.ok:
            self.bar.set_postfix_str(f"ok, median step {result.step_time_s * 1000:.1f} ms")
        else:
            self.bar.set_postfix_str(f"{result.status}: {result.reason}"[:120])
        self.bar.close()
