"""Several rounds of a comparison in one process (`runs/scheduling/resident_rounds.py`), child side:
which round this is, and the state the first round started from, put back before each later one.

A later round is the same work as a fresh run's: the weights, the optimizer's slots and step
count, and the seed generators' states are those the first round found when its training began,
and an array source's batches repeat after every round (`tensorflow/datasets.make_dataset` orders
one run's steps, then repeats them; a JAX run's order is one run's, once per round). A run with
`deterministic=True` therefore gives every round the first one's loss curve. The metrics need
nothing: Keras resets them at each epoch.
"""

from __future__ import annotations

from typing import Any

import keras

from ...runs.description.run_spec import RunSpec


class FirstState:
    """The values of a model's and its optimizer's variables, taken when training begins (the
    optimizer has built its slots by then)."""

    def __init__(self, model: Any) -> None:
        self._variables = [*model.variables, *model.optimizer.variables]
        self._values = [keras.ops.convert_to_numpy(v.value) for v in self._variables]

    def restore(self) -> None:
        for variable, value in zip(self._variables, self._values, strict=True):
            variable.assign(value)


class Rounds:
    """The rounds this process trains, one after another, and what a later one reports."""

    def __init__(self, spec: RunSpec, model: Any) -> None:
        self._model = model
        self._first_run_id = spec.run_id
        self.left = spec.rounds_here  # the current round and those after it
        self._before = 0  # rounds this process trained before the current one
        self._first_state: FirstState | None = None

    @property
    def later(self) -> bool:
        """Whether the current round is not the first this process trains."""
        return self._before > 0

    @property
    def more(self) -> bool:
        """Whether this process trains another round after the current one."""
        return self.left > 1

    def keep_first_state(self) -> None:
        """Called as the first round's training begins, when another round follows it."""
        if self.more and self._before == 0 and self._first_state is None:
            self._first_state = FirstState(self._model)

    def begin_next(self) -> None:
        """The next round: the first round's state put back."""
        if self._first_state is None:
            raise RuntimeError("the first round's state was not kept")
        self._first_state.restore()
        self.left -= 1
        self._before += 1

    def row_fields(self) -> dict[str, Any]:
        """What the current round's row adds to its `extra`: the run whose process trained it,
        when that was an earlier round's."""
        return {} if self._before == 0 else {"trained_in_process_of": self._first_run_id}
