"""What `tune="auto"` picks for a run: steps per execution, XLA and the input pipeline, by rules.

Plain values in, a frozen `Tuned` out, no TensorFlow: the worker calls `choose_settings` before
it compiles. Steps per execution divide the steps per epoch and the evaluation interval and leave
at least `MIN_TIMED_EXECUTIONS` timed executions; XLA is on for one GPU without a strategy and
off on the CPU; TensorFlow's input pipeline prefetches two executions' worth of batches. An
explicit `steps_per_execution=` or `jit_compile=` always wins; `tune="off"` keeps Keras's
defaults. Each rule's reason and measurement: `docs/strategies/data.md`, "The fast path".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ...backends import backend_record
from ...errors import GpkError, whole_number
from ...strategies import strategy_record

TUNE = ("auto", "off")
# Steps per execution aimed at (benchmarks/README.md: the per-execution cost is paid 1/8 as often,
# and the traced while-loop stays cheap to trace); lowered to fit the run.
TARGET_STEPS_PER_EXECUTION = 8
MIN_TIMED_EXECUTIONS = 4  # executions timed after warm-up, at least, for a median
# How a run's reason starts when its loop cannot take several steps in one call.
ONE_STEP_A_CALL_BY = "not used by "


@dataclass(frozen=True)
class Tuned:
    """The settings a run trains with, and who chose each (user, tune, or the default)."""

    tune: str  # auto | off
    steps_per_execution: int
    jit_compile: bool | None  # None: Keras's own "auto"
    prefetch_batches: int | None  # None: tf.data.AUTOTUNE alone
    why: dict[str, str] = field(default_factory=dict)  # per setting: who chose it and why

    def to_dict(self) -> dict[str, Any]:
        return {
            "tune": self.tune,
            "steps_per_execution": self.steps_per_execution,
            "jit_compile": self.jit_compile,
            "prefetch_batches": self.prefetch_batches,
            "why": dict(self.why),
        }


def check_tune(tune: Any, steps_per_execution: Any, jit_compile: Any, measure_comm: Any) -> None:
    """One sentence per bad value, raised in the caller before a worker starts."""
    if tune not in TUNE:
        raise GpkError(f"tune={tune!r} is not known; use 'auto' (the default) or 'off'")
    if steps_per_execution is not None:
        whole_number(steps_per_execution, "steps_per_execution", hint="or None to let tune choose")
    if jit_compile is not None and not isinstance(jit_compile, bool):
        raise GpkError(
            f"jit_compile={jit_compile!r} must be True, False or None (None: tune chooses)"
        )
    if not isinstance(measure_comm, bool):
        raise GpkError(f"measure_comm={measure_comm!r} must be True or False")


def choose_settings(
    *,
    tune: str,
    backend: str,
    strategy: str,
    mode: str,
    device_kind: str,
    devices: int,
    steps_per_epoch: int,
    total_steps: int,
    warmup_steps: int,
    evaluate_every_steps: int | None = None,
    deterministic: bool = False,
    steps_per_execution: int | None = None,
    jit_compile: bool | None = None,
    steps_together: bool = False,
) -> Tuned:
    """The settings of one run of `strategy` on `backend` under `tune`, the user's explicit
    values first. `steps_together`: the run's own loop can take several steps in one call
    (`Strategy.steps_together`), so tune's steps per execution apply as they do to `fit`."""
    why: dict[str, str] = {}
    record = strategy_record(strategy)
    on_fit = backend in record.fit_on  # trained by Keras's own fit on this backend
    fit = mode == "fit" and on_fit
    auto = tune == "auto" and fit
    on_backend = backend_record(backend)

    if steps_per_execution is not None:
        spe = steps_per_execution
        why["steps_per_execution"] = "user"
    elif auto or (tune == "auto" and steps_together):
        spe = tuned_steps_per_execution(
            steps_per_epoch, total_steps, warmup_steps, evaluate_every_steps
        )
        why["steps_per_execution"] = (
            f"tune: largest of <= {TARGET_STEPS_PER_EXECUTION} dividing the epoch"
            + (" and the evaluation interval" if evaluate_every_steps else "")
            + f" with >= {MIN_TIMED_EXECUTIONS} timed executions"
        )
    else:
        spe = 1
        why["steps_per_execution"] = (
            "default" if fit or steps_together else _loop(strategy, mode, on_fit)
        )

    if jit_compile is not None:
        jit = jit_compile
        why["jit_compile"] = "user"
    elif on_backend.xla_always:
        jit = None
        why["jit_compile"] = (
            "tune: " if auto else "default "
        ) + "(Keras's auto: on JAX, XLA compiles every step whatever the strategy)"
    elif auto and device_kind != "gpu":
        # Said, not left to Keras: its auto turns XLA on for a run without a strategy (the
        # baseline) wherever the machine has a GPU, even for a run planned on the CPU.
        jit = False
        why["jit_compile"] = "tune: off on the CPU, where XLA measured slower"
    elif auto:
        # Only ever switched on: elsewhere Keras's own "auto" stands (off under a tf.distribute
        # strategy and with op determinism).
        on = record.one_device and devices == 1 and not deterministic
        jit = True if on else None
        why["jit_compile"] = (
            "tune: one GPU, no tf.distribute strategy: Keras's own choice"
            if on
            else "tune: left to Keras (off "
            + ("with op determinism)" if deterministic else "under MirroredStrategy's replicas)")
        )
    else:
        jit = None
        why["jit_compile"] = "default (Keras's auto: off under a tf.distribute strategy)"

    prefetch = 2 * spe if auto and on_backend.reads_tf_data else None
    if on_backend.reads_tf_data:
        why["prefetch"] = (
            f"tune: tf.data autotuned, at least {prefetch} batches (two executions) ahead"
            if auto
            else "default (tf.data autotuned)"
        )
    else:
        why["prefetch"] = (
            "none: each batch read from the memory-mapped arrays as fit asks for it "
            "(keras.utils.PyDataset)"
        )
    return Tuned(tune, spe, jit, prefetch, why)


def tuned_steps_per_execution(
    steps_per_epoch: int,
    total_steps: int,
    warmup_steps: int,
    evaluate_every_steps: int | None = None,
) -> int:
    """The largest value <= the target that divides the epoch (and the evaluation interval) and
    leaves at least MIN_TIMED_EXECUTIONS executions after warm-up; 1 when none does."""
    interval = math.gcd(steps_per_epoch, evaluate_every_steps or steps_per_epoch)
    for spe in range(min(TARGET_STEPS_PER_EXECUTION, interval), 1, -1):
        if interval % spe:
            continue
        warm = warmup_in_executions(warmup_steps, spe, total_steps)
        if (total_steps - warm) // spe >= MIN_TIMED_EXECUTIONS:
            return spe
    return 1


def warmup_in_executions(warmup_steps: int, steps_per_execution: int, total_steps: int) -> int:
    """Warm-up rounded up to whole executions: the steps of one execution share its time, so the
    tracing of the first would otherwise leak into steps that count. At least one execution stays
    timed."""
    spe = max(steps_per_execution, 1)
    rounded = math.ceil(warmup_steps / spe) * spe
    return max(0, min(rounded, total_steps - spe))


def _loop(strategy: str, mode: str, on_fit: bool) -> str:
    if on_fit:
        return f"{ONE_STEP_A_CALL_BY}mode={mode!r}: a custom loop takes one step per call"
    return f"{ONE_STEP_A_CALL_BY}strategy={strategy!r}: its own loop takes one step per call"
