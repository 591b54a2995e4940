"""`micro_batches="auto"` in the worker: the curve measured round by round, the M that beats the
fewest micro-batches beyond noise on that same curve chosen, the weights of single-device
training kept, and the run's timeline saved in the Trace Event Format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_parallel_kit.pipeline.microbatch import Curve, candidates, choose, sizes
from tests import builders
from tests.builders import largest_difference, saved_weights
from tests.runs.results.test_trace_events import validate

pytestmark = pytest.mark.slow
K, BATCH = 2, 32


EXPERIMENT = dict(model=builders.deep_mlp, batch_size=BATCH, steps_per_epoch=3)  # conftest.py


@pytest.fixture(scope="module")
def reference(experiment, tmp_path_factory):
    path = tmp_path_factory.mktemp("reference") / "single.npz"
    assert experiment.run(strategy="single", save_weights=str(path)).ok
    return saved_weights(path)


@pytest.mark.parametrize("schedule", ["naive", "gpipe", "1f1b", "interleaved", "zb-h1"])
def test_auto_picks_the_argmin_of_its_own_curve_under_every_schedule(
    experiment, reference, tmp_path, schedule
):
    path = tmp_path / "model.npz"
    r = experiment.run(
        strategy="pipeline",
        devices=K,
        schedule=schedule,
        micro_batches="auto",
        save_weights=str(path),
    )
    assert r.ok, r.reason
    v = r.extra["virtual_stages"]
    curve = Curve.from_dict(r.extra["microbatch_curve"])
    assert set(curve.sizes) == set(sizes(schedule, K, BATCH, v))
    assert curve.stages == K * v
    # Naive has nothing to choose: its one size comes from the simulated view's passes, free.
    assert (curve.cost_s > 0) == (schedule != "naive")
    valid = candidates(schedule, K, BATCH, v)
    choice = r.extra["microbatch_choice"]
    assert choice["auto"] and r.micro_batches == choice["micro_batches"]
    # The row's curve, rounds and any measured again included, gives the row's choice.
    assert r.micro_batches == choose(curve, schedule, K, BATCH, v).micro_batches
    assert choice["against"] == valid[0]
    if r.micro_batches != valid[0]:
        margin = choice["margin"]
        assert margin["shorter"] > margin["noise"] and margin["rounds"] >= 2
    assert choice["reason"].startswith(f"M={r.micro_batches}: step on the curve ")
    assert largest_difference(saved_weights(path), reference) <= 1e-5


def test_an_explicit_m_wins_and_the_trace_opens(experiment, tmp_path):
    r = experiment.run(strategy="pipeline", devices=K, schedule="1f1b", micro_batches=4)
    assert r.ok and r.micro_batches == 4
    choice = r.extra["microbatch_choice"]
    assert not choice["auto"] and choice["reason"].startswith("M=4 as given; auto would choose")
    trace = json.loads(Path(r.save_trace(str(tmp_path / "run.json"))).read_text())
    events = validate(trace)
    tasks = [e for e in events if e["pid"] == 1 and e["cat"] in ("forward", "backward")]
    assert {e["tid"] for e in tasks} == {1, 2}
    per_step = 2 * 2 * 4  # devices × (F, B) × micro-batches
    assert tasks and len(tasks) % per_step == 0
    assert any(e["cat"] == "communication" for e in events)
