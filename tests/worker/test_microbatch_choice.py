"""Which micro-batch sizes a pipeline times before choosing M
(`worker/pipeline/microbatch_choice.py`)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpu_parallel_kit.worker.pipeline.microbatch_choice import curve_and_choice


def _spec(mesh=None):
    options = {"stages": 2, **({"mesh": mesh} if mesh else {})}
    return SimpleNamespace(
        schedule="1f1b",
        virtual_stages=1,
        global_batch=8,
        micro_batches=4,
        options=options,
        devices=SimpleNamespace(count=8 if mesh else 2),
    )


def test_stages_on_a_data_axis_time_no_size_it_could_not_split():
    timed = []

    def measure(sizes, curve):
        timed.append(sizes)
        raise RuntimeError("stop after recording the sizes")

    # Without a mesh the curve times every candidate's size, one sample included.
    with pytest.raises(RuntimeError, match="stop after"):
        curve_and_choice(_spec(), measure)
    assert timed and 1 in timed[0]
    # A (2, 2) mesh's data axis cannot split a one-sample micro-batch: nothing is timed.
    timed.clear()
    assert curve_and_choice(_spec(mesh=(2, 2)), measure) == (None, None)
    assert timed == []
