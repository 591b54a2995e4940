"""Bytes of TensorFlow variables, for the engines' memory budget (`worker/budget.py`)."""

from __future__ import annotations

from collections.abc import Iterable

import tensorflow as tf

from ...budget import MemoryBudgetExceeded, check_budget

__all__ = ["MemoryBudgetExceeded", "check_budget", "variable_bytes"]


def variable_bytes(variables: Iterable) -> int:
    total = 0
    for variable in variables:
        total += (
            int(tf.TensorShape(variable.shape).num_elements() or 0)
            * tf.as_dtype(variable.dtype).size
        )
    return total
