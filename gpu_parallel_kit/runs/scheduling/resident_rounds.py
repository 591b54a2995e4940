"""A comparison's rounds of one configuration trained in one process, one round at a time.

At the end of a round the process reports the round's row and waits, holding nothing; when the
round's turn comes it puts back the weights and optimizer state its first round started from,
passes the training gate (`runs/scheduling/training_gate.py`) and trains the same batches again,
already traced. Only runs that Keras's `fit` trains stay, and a pipeline's, whose own loop
trains rounds as `fit` does, without validation, a target or saved weights; `GPK_RESIDENT=0`
starts a fresh process for every round. A round ends at an epoch's end, where both backends'
`fit` keep the state in the model's variables (a pipeline puts its stages' back itself). Why,
and what it costs: `docs/results.md`, "What a round costs".
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from ...strategies import strategy_record
from ..description.run_spec import RunSpec


def stays_resident(spec: RunSpec, rounds: int) -> bool:
    """Whether `spec`'s rounds may be trained in one process (the rules above, or a strategy
    whose own loop trains them so: `Strategy.rounds_in_process`)."""
    if rounds < 2 or _one_at_a_time():
        return False
    return waits_for_turns(spec) or (
        strategy_record(spec.strategy).rounds_in_process and _waits_alone(spec)
    )


def waits_for_turns(spec: RunSpec) -> bool:
    """Whether `spec`'s process may wait for the caller's word between its warm-up or its
    rounds: Keras's `fit` in one process under the gate, with no validation, target or saved
    weights."""
    record = strategy_record(spec.strategy)
    return spec.backend in record.fit_on and spec.mode == "fit" and _waits_alone(spec)


def _waits_alone(spec: RunSpec) -> bool:
    """One process under the gate, with no validation, target or saved weights."""
    training = spec.training
    return (
        not spec.several_processes
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
