"""Step statistics on literal inputs: durations, median and spread, and the warm-up."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.worker.measuring.stats import (
    default_warmup_steps,
    median_and_spread,
    step_durations,
)


def test_step_durations_are_measured_end_to_end():
    assert step_durations([1.5, 2.0, 3.0], first_begin=1.0) == [0.5, 0.5, 1.0]


def test_median_and_interquartile_spread():
    assert median_and_spread([1.0, 2.0, 3.0, 4.0, 100.0]) == (3.0, 2.0)
    assert median_and_spread([0.2]) == (0.2, 0.0)
    assert median_and_spread([]) == (None, None)


@pytest.mark.parametrize(("total", "warmup"), [(1, 0), (3, 1), (4, 2), (100, 2)])
def test_warmup_never_hides_more_than_half_the_steps(total, warmup):
    assert default_warmup_steps(total) == warmup
