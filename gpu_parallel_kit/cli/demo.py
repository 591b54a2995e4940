"""The demo: single-device against data parallel training of the built-in MLP on 1, 2 and 4 devices.

Sized for a 2-core laptop with no GPU (virtual devices, made automatically by `plan_devices`): the
whole command, first worker start included, took 10.9-12.3 s on JAX (the backend it prefers,
`launch.DEMO_BACKENDS`) beside 10.4-12.1 s for the fixed-round demo it replaced (10 steps, 3
rounds, which could not tell), most of it the server's start, the rounds
prepared side by side (later rounds are trained by their first round's processes,
`runs/scheduling/resident_rounds.py`) and the count of the step for the projection, made beside
them. Each round of a configuration trains one pass over the synthetic tabular set in global
batches of 512 (32 steps, 2 of them warm-up); the comparison adds rounds to a configuration until
its step's interval is within 1.25x or its measuring budget is spent
(`runs/scheduling/measuring_until_known.py`), so no row is left too loose to tell. GPK_QUICK=1
trains 24 steps a round. The report adds rows projected onto 8 H100s joined by NVLink 4 (4 and 8
devices), labelled projected: the MLP's training step counted by the compiler (0.63 MFLOP per
sample) on the H100's roofline, which leaves each GPU's step bound by kernel launches, so 8 GPUs
reach a speedup below 1.

>>> comparison = run_demo("gpk_report")  # doctest: +SKIP
>>> comparison.table  # doctest: +SKIP
"""

from __future__ import annotations

from ..api import Experiment
from ..backends import backend_record
from ..comparison import Comparison
from ..runs.description.synthetic_data import default_samples, quick_mode
from ..strategies import DEFAULT_COMPARISON
from .launch import demo_backend

MODEL = "mlp"
DATA = "tabular"
STRATEGIES = DEFAULT_COMPARISON
DEVICES = (1, 2, 4)
BATCH_SIZE = 512  # large enough that a step is compute, not per-step overhead; divides 1, 2, 4
# CI: enough measured steps (after the 2 warm-up ones) for a median and a spread that mean
# something; 8 gave 6, and a 32% "gain" of data on one device over single.
QUICK_STEPS = 24
# Seconds of rounds each configuration may take while its step is not yet known within 1.25x:
# enough on two cores for every interval to be readable (under 2x) while the demo costs what the
# fixed-round one did; 1.5 s took it to 11-12 s beside that one's 10.4, and a comparison's default
# (6 s) to 19-28 s.
MEASURE_S = 0.75
# On a CPU the demo can only show slowdowns; the cost model's projection of the same workload onto
# H100s joined by NVLink 4, labelled projected, shows what it expects of real hardware. Compute
# is the step's counted work on the H100, not the CPU's clock.
PROJECTION = "nvlink4"
PROJECTED_GPU = "h100"
PROJECTED_DEVICES = (1, 4, 8)
# Workers are timed out well before the slow-test timeout, so a hang is reported as a row.
TIMEOUT_S = 120.0


def demo_experiment(
    progress: bool | str = True, log: str | None = None, backend: str | None = None
) -> Experiment:
    """The demo's experiment: the built-in MLP on its synthetic set, one pass over the data, on
    `demo_backend(backend)`."""
    # Each round trains one pass: a round's timing then rests on 30 steps, and rounds are few.
    steps = QUICK_STEPS if quick_mode() else default_samples(DATA) // BATCH_SIZE
    return Experiment(
        model=MODEL,
        data=DATA,
        batch_size=BATCH_SIZE,
        epochs=1,
        steps_per_epoch=steps,
        seed=0,
        timeout=TIMEOUT_S,
        log=log,
        progress=progress,
        backend=demo_backend(backend),
    )


def describe(experiment: Experiment) -> str:
    """One line saying what the demo compares, for the front ends to show before it starts."""
    training = experiment.training
    devices = ", ".join(str(d) for d in DEVICES)
    backend = backend_record(experiment.backend)
    return (
        f"Demo: built-in {MODEL} on the synthetic {DATA} set ({experiment.data.samples} samples), "
        f"global batch {training.batch_size}, {training.steps_per_epoch} steps per run; "
        f"{' vs '.join(STRATEGIES)} on {devices} devices ({backend.summary})"
        + (" (GPK_QUICK)" if quick_mode() else "")
        + f"; then projected onto {PROJECTED_GPU} GPUs joined by {PROJECTION} (4 and 8 devices, "
        "compute counted, labelled projected)"
    )


def with_projection(comparison: Comparison) -> Comparison:
    """The measured rows plus the projection onto `PROJECTION` (4 and 8 devices, and the
    projected one-device baseline they are compared with)."""
    return comparison.project(PROJECTION, PROJECTED_DEVICES, device=PROJECTED_GPU)


def run_demo(
    out_dir: str = "gpk_report",
    progress: bool = True,
    log: str | None = None,
    backend: str | None = None,
) -> Comparison:
    """Run the demo comparison, add the projected rows, and write the report (table.csv,
    table.md, PNGs) to `out_dir`."""
    experiment = demo_experiment(progress, log, backend)
    experiment.count_ahead()  # the projection's count, beside the servers' start
    comparison = with_projection(experiment.compare(STRATEGIES, DEVICES, measure_s=MEASURE_S))
    comparison.save_report(out_dir)
    return comparison
