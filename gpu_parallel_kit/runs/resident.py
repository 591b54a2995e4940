"""A comparison's rounds of one configuration trained in one process, one round at a time.

A round run as a fresh process pays for the fork, the device set-up, the build and, above all,
Keras tracing its train function in the first step: 0.7 s for the built-in MLP on one device and
2.5-3 s under `MirroredStrategy` on four (a replica's step and optimizer update are traced once
per replica), against 10 steps of 6-10 ms that the demo times per round. So a configuration that
allows it keeps its process between rounds. At the end of a round the process reports the
round's row and waits, holding nothing; the caller sends it the word when the round's turn comes
(A, B, C, A, B, C, … as before), and the process puts back the weights and optimizer state its
first round started from, passes the training gate (`runs/gate.py`) and trains the next round on
the same batches, already traced. Each round is still its own row in the run log, with its own
warm-up steps left out; a later round names the run whose process trained it
(`extra["trained_in_process_of"]`) and reports the communication that run measured.

What stays: one configuration's processes are alive together, each waiting between its rounds
(the demo: four processes of about 350 MiB). Only runs that `fit` on TensorFlow stay, on devices
the gate covers (not GPUs: waiting processes would hold device memory), without validation, a
target or saved weights (each round would validate, train to the target or save again). JAX
runs start a process per round: the JAX trainer keeps the state of a `fit` in flight outside the
model's variables, so putting the first weights back mid-`fit` is not a plain assignment.
`GPK_RESIDENT=0` starts a fresh process for every round.
"""

from __future__ import annotations

import dataclasses
import os

from ..strategies import strategy as strategy_record
from .spec import RunSpec


def stays_resident(spec: RunSpec, rounds: int) -> bool:
    """Whether `spec`'s rounds may be trained in one process (the rules above)."""
    if rounds < 2 or os.environ.get("GPK_RESIDENT", "").strip() == "0":
        return False
    record = strategy_record(spec.strategy)
    training = spec.training
    return (
        spec.backend == "tensorflow"
        and "tensorflow" in record.fit_on
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
