"""One progress line per configuration of a comparison, updated in place as its rounds finish.

A comparison measures each configuration over several rounds, interleaved; a line per round
would bury what is worth watching, each step time closing in on a known value. So each
configuration has one line: the round in hand and its live step, then the rounds finished, their
median step and its 95 % interval, and at the end what ended the measuring ("known", "budget
spent") or the status and the one sentence of a failure. Where the line can be redrawn (a
terminal) the block of lines is redrawn in place; in a notebook it is one output updated through
its display id, so the saved notebook keeps the last lines only; where nothing redraws (a pipe, a
log, CI) each line is printed once, when its configuration ends.

>>> lines = configuration_lines(["single×1", "data×2 (virtual)"])  # doctest: +SKIP
>>> line = lines.line(0); line({"event": "round", "round": 1})  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from ..results.run_result import RunResult
from .progress_bars import in_widget, redrawn, wrapped

STOPPED = "stopped"  # a configuration the comparison left before its measuring ended
NOT_STARTED = "not started"


@dataclasses.dataclass(frozen=True)
class RoundsSoFar:
    """What a configuration's finished rounds have measured, told after each of its rounds.

    Args:
        configuration: the run id of the configuration's first round.
        rounds: rounds finished, failed ones included.
        step_s: median of the finished rounds' median steps; None before one finished.
        low_s: low end of its 95 % interval.
        high_s: high end of its 95 % interval.
        ended: what ended its measuring ("known", "budget spent", ...); "" while it goes on.
    """

    configuration: str
    rounds: int
    step_s: float | None = None
    low_s: float | None = None
    high_s: float | None = None
    ended: str = ""


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3g}"


def measured_text(so_far: RoundsSoFar) -> str:
    """ "3 rounds · median step 2.61 ms (2.4–2.9)", or the rounds alone before a step."""
    rounds = f"{so_far.rounds} round{'s' if so_far.rounds != 1 else ''}"
    if so_far.step_s is None:
        return rounds
    step = f"median step {_ms(so_far.step_s)} ms"
    if so_far.low_s is not None and so_far.high_s is not None:
        step += f" ({_ms(so_far.low_s)}–{_ms(so_far.high_s)})"
    return f"{rounds} · {step}"


class ConfigurationLine:
    """One configuration's line: every round's events and results in, one line of text out.

    Called like a run's progress bar (`line(event)`, `line.close(result)` after each round), and
    told what the rounds measured (`line.measured(so_far)`); `changed` is called after each.

    Args:
        label: the configuration's name, e.g. "data×2 (virtual)".
        changed: called with the line whenever its text may have changed.
    """

    def __init__(self, label: str, changed: Callable[[ConfigurationLine], None]) -> None:
        self.label = label
        self._changed = changed
        self.round = 0  # the round in hand, from 1; 0 before the first
        self.now = ""  # what the round in hand is doing; "" between rounds
        self.so_far: RoundsSoFar | None = None
        self.failure = ""  # the first failed round's status and sentence
        self.failed_round = 0
        self.ended = False

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "round":
            self.round = int(event["round"])
            self.now = "starting the worker"
        elif kind == "phase":
            if event["phase"] == "training" or event.get("total"):
                self.now = "training"
            else:
                self.now = f"start-up: {event['phase']}"
        elif kind == "progress":
            total = event.get("total")
            steps = f"step {event['step']}" + (f"/{total}" if total else "")
            self.now = f"{steps} · {_ms(float(event['step_time_s']))} ms per step"
        else:
            return
        self._changed(self)

    def close(self, result: RunResult) -> None:
        """A round ended: the first failure and its sentence stay on the line."""
        if not result.ok and not self.failure:
            self.failure = result.status + (f": {result.reason}" if result.reason else "")
            self.failed_round = self.round
        self.now = ""
        self._changed(self)

    def measured(self, so_far: RoundsSoFar) -> None:
        """What the finished rounds measured; the line is final once `so_far.ended` says why."""
        self.so_far = so_far
        self.ended = self.ended or bool(so_far.ended)
        self._changed(self)

    def finish(self) -> None:
        """End a line the comparison left unfinished (cancelled, or stopped)."""
        if not self.ended:
            self.ended = True
            self._changed(self)

    def text(self) -> str:
        """The line without its label."""
        return self._final() if self.ended else self._going()

    def _going(self) -> str:
        if self.round == 0:
            return "waiting"
        if not self.now and self.so_far is not None:
            return f"{measured_text(self.so_far)} · measuring"
        parts = [f"round {self.round}", self.now or "ended"]
        if self.so_far is not None and self.so_far.step_s is not None:
            parts.append(f"so far {measured_text(self.so_far)}")
        return " · ".join(parts)

    def _final(self) -> str:
        so_far = self.so_far
        if so_far is None or so_far.step_s is None:
            if self.failure:
                where = f" in round {self.failed_round}" if self.failed_round > 1 else ""
                status, _, reason = self.failure.partition(": ")
                return f"{status}{where}" + (f": {reason}" if reason else "")
            return NOT_STARTED if self.round == 0 else STOPPED
        parts = ["ok", measured_text(so_far), so_far.ended or STOPPED]
        if self.failure:
            parts.append(f"round {self.failed_round} {self.failure}")
        return " · ".join(parts)


class ConfigurationLines:
    """A comparison's lines, one per configuration, shown as they change.

    This base shows nothing; `configuration_lines` picks where the lines go.

    Args:
        labels: each configuration's name, in the comparison's order.
    """

    def __init__(self, labels: Sequence[str]) -> None:
        self._lock = threading.Lock()  # a panel's or a follower's thread may report too
        self.lines = [ConfigurationLine(label, self._changed) for label in labels]
        self._width = max((len(label) for label in labels), default=0) + 1

    def line(self, index: int) -> ConfigurationLine:
        """The line of the comparison's `index`-th configuration."""
        return self.lines[index]

    def text_of(self, line: ConfigurationLine) -> str:
        """A line as shown: its label, aligned with the others', then its text."""
        return f"{line.label + ':':<{self._width}} {line.text()}"

    def close(self) -> None:
        """End every line left unfinished, and show them last."""
        for line in self.lines:
            line.finish()

    def _changed(self, line: ConfigurationLine) -> None:
        with self._lock:
            self._show(line)

    def _show(self, line: ConfigurationLine) -> None:
        """Show `line`'s change; nothing in this base."""


class RedrawnLines(ConfigurationLines):
    """On a terminal: the block of started lines, redrawn in place at each change."""

    def __init__(self, labels: Sequence[str], stream: TextIO | None = None) -> None:
        super().__init__(labels)
        self.stream = stream
        self._drawn = 0  # the terminal lines the block took when last drawn

    def _show(self, line: ConfigurationLine) -> None:
        width = max(shutil.get_terminal_size().columns - 1, 20)
        rows: list[str] = []
        for each in self.lines:
            if each.round == 0 and not each.ended:
                continue
            text = self.text_of(each)
            # A running line is cut to the terminal; an ended one is whole, its sentence wrapped.
            rows += wrapped(text, width=width).splitlines() if each.ended else [text[:width]]
        up = f"\x1b[{self._drawn}F" if self._drawn else ""
        stream = self.stream or sys.stdout
        stream.write(up + "".join(f"\x1b[2K{row}\n" for row in rows))
        stream.flush()
        self._drawn = len(rows)


class DisplayedLines(ConfigurationLines):
    """In a notebook: the block of lines as one text output, replaced through its display id, so
    a saved notebook keeps the last lines, not their history."""

    def __init__(self, labels: Sequence[str]) -> None:
        super().__init__(labels)
        self._handle: Any = None

    def block(self) -> str:
        """The lines started so far, an ended one's sentence wrapped whole."""
        return "\n".join(
            wrapped(self.text_of(line)) if line.ended else self.text_of(line)
            for line in self.lines
            if line.round or line.ended
        )

    def _show(self, line: ConfigurationLine) -> None:
        shown = {"text/plain": self.block()}
        if self._handle is None:
            from IPython.display import display  # in a kernel, where the block is drawn

            self._handle = display(shown, raw=True, display_id=True)
        else:
            self._handle.update(shown, raw=True)


class FinishedLines(ConfigurationLines):
    """Where nothing redraws a line (a pipe, a log, CI): each line printed once, when its
    configuration's measuring ends."""

    def __init__(self, labels: Sequence[str], stream: TextIO | None = None) -> None:
        super().__init__(labels)
        self.stream = stream
        self._printed: set[int] = set()

    def _show(self, line: ConfigurationLine) -> None:
        if line.ended and id(line) not in self._printed:
            self._printed.add(id(line))
            print(wrapped(self.text_of(line)), file=self.stream or sys.stdout, flush=True)


def configuration_lines(
    labels: Sequence[str], enabled: bool = True, stream: TextIO | None = None
) -> ConfigurationLines:
    """The lines of a comparison's configurations, where they can be shown: redrawn on a
    terminal, one updated output in a notebook, printed as each ends elsewhere; none when not
    `enabled`."""
    if not enabled:
        return ConfigurationLines(labels)
    if in_widget():
        return DisplayedLines(labels)
    if redrawn(stream):
        return RedrawnLines(labels, stream)
    return FinishedLines(labels, stream)


class ComparisonProgress:
    """Hands each round of a comparison to its configuration's progress handler, made when the
    configuration's first round starts, and tells it what its rounds measured.

    Args:
        specs: the comparison's configurations: their first rounds' specs.
        make: the handler of the configuration at an index, given its spec: a line of
            `configuration_lines`, or a front end's own (the panel's row).
        lines: the comparison's lines, to close with it; None for a front end's handlers.
    """

    def __init__(
        self,
        specs: Sequence[Any],
        make: Callable[[int, Any], Any],
        lines: ConfigurationLines | None = None,
    ) -> None:
        self._specs = list(specs)
        self._index = {spec.run_id: index for index, spec in enumerate(self._specs)}
        self._make = make
        self._lines = lines
        self._handlers: dict[int, Any] = {}

    def round(self, spec: Any, round_of: tuple[int, int, str] | None) -> Any:
        """The handler of `spec`'s configuration, told that round `round_of` begins and the run
        id it has."""
        index = self._index[round_of[2] if round_of is not None else spec.run_id]
        if index not in self._handlers:
            self._handlers[index] = self._make(index, self._specs[index])
        handler = self._handlers[index]
        number = (round_of[0] if round_of is not None else 0) + 1
        handler({"event": "round", "round": number, "run_id": spec.run_id})
        return handler

    def measured(self, so_far: RoundsSoFar) -> None:
        """Tell the configuration's handler what its finished rounds measured."""
        handler = self._handlers.get(self._index[so_far.configuration])
        tell = getattr(handler, "measured", None)  # a front end's handler may not listen
        if tell is not None:
            tell(so_far)

    def close(self) -> None:
        """End the lines the comparison left unfinished."""
        if self._lines is not None:
            self._lines.close()
