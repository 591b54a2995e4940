"""GPipe against naive on the conv stack, on each backend in the same invocation.

Each round runs, on every asked backend, naive (M=1) and gpipe (M=8) at K=4 back to back; the
pair's simulated steps (task times measured alone, replayed on K devices) give that round's
ratio gpipe ÷ naive on that backend, and the two backends' ratios of the same round give JAX's
over TensorFlow's. The rounds alternate which backend and which schedule goes first, so drift of
the machine hits both sides alike. The figures are medians over the rounds, with the lowest and
highest round beside them.
"""

from __future__ import annotations

import json
import pathlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from text_cells import load_average

import gpu_parallel_kit as gpk

BACKENDS = ("tensorflow", "jax")
STAGES = 4
MICRO_BATCHES = 8
TARGET = 1.1  # JAX's ratio gpipe ÷ naive at most TensorFlow's × 1.1
PLANS = {
    "naive": {"schedule": "naive"},
    "gpipe": {"schedule": "gpipe", "micro_batches": MICRO_BATCHES},
}

Round = dict[str, dict[str, dict[str, Any]]]  # backend -> schedule -> the run's figures


@dataclass(frozen=True)
class Spread:
    """A median over paired rounds, with the lowest and highest round."""

    median: float
    low: float
    high: float
    rounds: int  # rounds where both sides finished

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread | None:
        if not values:
            return None
        return cls(statistics.median(values), min(values), max(values), len(values))

    def __str__(self) -> str:
        return (
            f"{self.median:.3f} (rounds {self.low:.3f}–{self.high:.3f}, "
            f"{self.rounds} paired round{'s' * (self.rounds != 1)})"
        )


def round_ratios(rounds: Sequence[Round], backend: str) -> list[float]:
    """Per round, gpipe's simulated step over naive's on `backend`; a round where either run
    has no simulated step is left out."""
    ratios = []
    for one in rounds:
        runs = one.get(backend, {})
        naive, gpipe = (runs.get(s, {}).get("simulated_step_s") for s in PLANS)
        if naive and gpipe:
            ratios.append(gpipe / naive)
    return ratios


def round_quotients(
    rounds: Sequence[Round], top: str = "jax", bottom: str = "tensorflow"
) -> list[float]:
    """Per round where both backends have a ratio, `top`'s ratio over `bottom`'s."""
    quotients = []
    for one in rounds:
        a, b = round_ratios([one], top), round_ratios([one], bottom)
        if a and b:
            quotients.append(a[0] / b[0])
    return quotients


def verdict(spread: Spread, target: float = TARGET) -> str:
    """Met or missed by the median, and within the rounds' noise when a round fell on the other
    side of the target."""
    said = "met" if spread.median <= target else "MISSED"
    if spread.low <= target < spread.high:
        said += ", within the rounds' noise"
    return said


def summary_lines(rounds: Sequence[Round], backends: Sequence[str]) -> list[str]:
    """Each backend's ratio gpipe ÷ naive, and JAX's over TensorFlow's against the target."""
    lines = [f"simulated step, gpipe M={MICRO_BATCHES} ÷ naive, K={STAGES}, conv stack:"]
    for backend in backends:
        naive = _median(rounds, backend, "naive")
        gpipe = _median(rounds, backend, "gpipe")
        spread = Spread.of(round_ratios(rounds, backend))
        steps = (
            f"; naive {naive * 1e3:.1f} ms, gpipe {gpipe * 1e3:.1f} ms (medians)"
            if naive and gpipe
            else ""
        )
        lines.append(f"  {backend:<10} {spread or 'no paired round finished'}{steps}")
    if set(BACKENDS) <= set(backends):
        spread = Spread.of(round_quotients(rounds))
        if spread is None:
            lines.append("JAX's ratio ÷ TensorFlow's: no round finished on both backends")
        else:
            lines.append(
                f"JAX's ratio ÷ TensorFlow's: {spread}; target ≤ {TARGET}: {verdict(spread)}"
            )
    return lines


def _median(rounds: Sequence[Round], backend: str, schedule: str) -> float | None:
    values = [
        s
        for one in rounds
        if (s := one.get(backend, {}).get(schedule, {}).get("simulated_step_s")) is not None
    ]
    return statistics.median(values) if values else None


def run_order(backends: Sequence[str], index: int) -> list[tuple[str, str]]:
    """The (backend, schedule) runs of round `index`: each backend's pair back to back, the
    backends and the pair's order turned round every other round."""
    schedules = list(PLANS) if index % 2 == 0 else list(PLANS)[::-1]
    ordered = list(backends) if index % 2 == 0 else list(backends)[::-1]
    return [(backend, schedule) for backend in ordered for schedule in schedules]


def run_rounds(
    exp: gpk.Experiment, backends: Sequence[str], rounds: int, say: Callable[[str], None] = print
) -> list[Round]:
    """Every round's runs, planned (so validated) before the first starts."""
    for backend in backends:
        for plan in PLANS.values():
            exp.plan("pipeline", STAGES, backend=backend, **plan)
    done: list[Round] = []
    for index in range(rounds):
        one: Round = {}
        for backend, schedule in run_order(backends, index):
            began = time.perf_counter()
            result = exp.run("pipeline", STAGES, backend=backend, **PLANS[schedule])
            took = time.perf_counter() - began
            figures = _figures(result)
            one.setdefault(backend, {})[schedule] = figures
            simulated = figures["simulated_step_s"]
            said = (
                f"simulated {simulated * 1e3:.1f} ms, measured {result.step_time_s * 1e3:.1f} ms"
                if result.ok and simulated
                else f"{result.status}: {result.reason}"
            )
            say(f"[round {index + 1}/{rounds}] {backend:<10} {schedule:<5} {said}  ({took:.1f} s)")
            sys.stdout.flush()
        done.append(one)
    return done


def _figures(result: gpk.RunResult) -> dict[str, Any]:
    extra = result.extra if result.ok else {}
    return {
        "status": result.status,
        "reason": result.reason,
        "micro_batches": result.micro_batches,
        "step_s": result.step_time_s if result.ok else None,
        "simulated_step_s": extra.get("simulated_step_time_s"),
        "work_alone_s": extra.get("work_alone_s"),
        "task_overhead_s": extra.get("task_overhead_s"),
        "stage_tasks": extra.get("stage_tasks"),
    }


def compare_backends(
    experiment: Callable[..., gpk.Experiment],
    backends: Sequence[str],
    rounds: int,
    json_path: str | None,
) -> None:
    """Run the rounds on one Experiment of the conv stack and print the summary."""
    began = time.perf_counter()
    print(
        f"conv stack, K={STAGES}: naive and gpipe M={MICRO_BATCHES} on {', '.join(backends)}, "
        f"{rounds} round{'s' * (rounds != 1)}; load average {load_average()}"
    )
    with tempfile.TemporaryDirectory(prefix="gpk_microbatch_") as folder:
        exp = experiment(log=str(pathlib.Path(folder) / "runs.sqlite"))
        done = run_rounds(exp, backends, rounds)
    print()
    print("\n".join(summary_lines(done, backends)))
    print(f"\nwall time {time.perf_counter() - began:.0f} s; load average {load_average()}")
    if json_path:
        pathlib.Path(json_path).write_text(json.dumps({"backends": backends, "rounds": done}))
        print(f"raw figures written to {json_path}")
