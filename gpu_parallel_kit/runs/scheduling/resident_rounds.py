"""A comparison's rounds of one configuration trained in one process, one round at a time.

A round run as a fresh process pays for the fork, the device set-up, the build and, above all,
Keras tracing its train function in the first step: 0.7 s for the built-in MLP on one device and
2.5-3 s under `MirroredStrategy` on four (a replica's step and optimizer update are traced once
per replica), against 10 steps of 6-10 ms that the demo times per round. So a configuration that
allows it keeps its process between rounds. At the end of a round the process reports the
round's row and waits, holding nothing; the caller sends it the word when the round's turn comes
(A, B, C, A, B, C, … as before), and the process puts back the weights and optimizer state its
first round started from, passes the training gate (`runs/scheduling/training_gate.py`) and trains
the next round on the same batches, already traced. Each round is still its own row in the run log,
with its own warm-up steps left out; a later round names the run whose process trained it
(`extra["trained_in_process_of"]`) and reports the communication that run measured.

What stays: a comparison's configurations have their processes alive together, each waiting
between its rounds (the demo: four processes of about 350 MiB). Only runs that Keras's `fit`
trains stay (on TensorFlow or JAX), on devices the gate covers (not GPUs: waiting processes would
hold device memory), without validation, a target or saved weights (each round would validate,
train to the target or save again). A round ends at an epoch's end, where both backends' `fit`
has the state in the model's variables: JAX's trainer writes its state back there at each
epoch's end and reads it again at the next epoch's first step, so the first round's state put
back in between is the state the next round trains from. `GPK_RESIDENT=0` starts a fresh
process for every round.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from ...strategies import strategy_record
from ..description.run_spec import RunSpec


def stays_resident(spec: RunSpec, rounds: int) -> bool:
    """Whether `spec`'s rounds may be trained in one process (the rules above)."""
    if rounds < 2 or _one_at_a_time():
        return False
    return waits_for_turns(spec)


def waits_for_turns(spec: RunSpec) -> bool:
    """Whether `spec`'s process may wait for the caller's word between its warm-up or its
    rounds: Keras's `fit` in one process under the gate, with no validation, target or saved
    weights."""
    record = strategy_record(spec.strategy)
    training = spec.training
    return (
        spec.backend in record.fit_on
        and spec.mode == "fit"
        and not record.processes
        and spec.gate is not None
        and training.validation is None
        and training.target is None
        and spec.save_weights is None
    )


def round_spec(spec: RunSpec, turn: int, rounds: int, run_id: str) -> RunSpec:
    """`spec` as round `turn` (from 0) of `rounds`, under `run_id`; marked resident when its
    configuration's rounds share a process."""
    resident = (spec.run_id, turn, rounds) if stays_resident(spec, rounds) else None
    return dataclasses.replace(spec, run_id=run_id, resident=resident)


def prepared_together(first_rounds: Sequence[RunSpec]) -> list[RunSpec]:
    """The first rounds a comparison starts at once, marked so (`RunSpec.prepares_together`).

    Their processes set up, build, trace what they measure after training and their warm-up
    steps side by side, each under a share of the training gate
    (`runs/scheduling/training_gate.py`), then wait for their turns at their first timed step
    (`recorder.StepTimer`); the first timed step waits for the last of them. None of it is timed; on
    two cores the demo's four configurations in 2 rounds took 5.9-8.7 s so, against 9.4-9.5 s
    prepared one after another (benchmarks/README.md). Runs of one round are prepared so too: a run
    started ahead would set up only while the run before it measures, and its warm-up would then
    wait for its turn. Only runs that may wait for the caller's word (`waits_for_turns`); fewer than
    two: none (nothing to prepare beside). `GPK_RESIDENT=0`, which trades start-ups for memory,
    keeps one configuration's process at a time here too."""
    if _one_at_a_time():
        return []
    chosen = [spec for spec in first_rounds if waits_for_turns(spec)]
    if len(chosen) < 2:
        return []
    return [dataclasses.replace(spec, prepares_together=True) for spec in chosen]


def _one_at_a_time() -> bool:
    """`GPK_RESIDENT=0`: a process per round, and no configurations' processes alive together
    (the run started ahead aside)."""
    return os.environ.get("GPK_RESIDENT", "").strip() == "0"
