"""A progress bar per run (tqdm.auto: a widget in notebooks, text in terminals).

A comparison shows one line per configuration instead (`configuration_lines.py`); these bars are
a single run's, and a comparison's rounds' with `progress="rounds"`.

Start-up (devices, model, compile) is a phase of its own, not steps: tqdm's own rate would count it
and flip between "step/s" and "s/step" beside a median step in ms, so the bar shows no tqdm rate,
only the live step time in ms while training. A failed run's reason goes on a line under the bar,
whole, instead of being cut on it.

Where nothing redraws a line — stdout sent to a file or a CI log, outside a notebook — a bar's
carriage-return updates would pile up on one line; there each run prints one line when it starts
and one when it ends instead (`LineProgress`), on stdout beside the table.
"""

from __future__ import annotations

import sys
import textwrap
import time
from typing import Any, NamedTuple, TextIO

from tqdm.auto import tqdm

from ...backends import backend_record
from ...strategies import strategy_record
from ..results.run_result import RunResult

# tqdm writes the postfix as ", <text>".
# A worker's own start-up longer than the caller saw by this much was spent before the caller
# followed it: the run was started ahead, beside the last one.
AHEAD_MARGIN_S = 0.05
BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar:24}| {n_fmt}/{total_fmt} steps{postfix}"
# In a notebook the bar is a widget: tqdm.notebook finds where to put it by the plain "{bar}" and
# writes everything else as text beside it. With a width ("{bar:24}") it finds no place, and the
# text bar is drawn as well, beside the widget's: two bars per run.
WIDGET_BAR_FORMAT = BAR_FORMAT.replace("{bar:24}", "{bar}")
# Where a later round's start-up went: none of its own, its process started for the first round.
EARLIER_ROUND = "an earlier round's process"
START_FORMAT = "{desc}"  # before the worker says how many steps there are: the phase only
# A printed line longer than its output area is broken by the browser or the terminal wherever the
# edge falls, inside a word; a notebook's output area holds about 100 characters at 850 px.
LINE_WIDTH = 100


def wrapped(text: str, indent: str = "  ", width: int = LINE_WIDTH) -> str:
    """`text` in lines of at most `width` characters, broken between words only; the lines
    after the first indented, so they read as one."""
    return textwrap.fill(
        text,
        width=width,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )


def in_widget() -> bool:
    """Whether tqdm.auto draws widgets here (in a kernel) rather than text."""
    # tqdm.auto's class is defined in tqdm.auto either way; in a kernel it derives from
    # tqdm.notebook's widget bar.
    return any(base.__module__ == "tqdm.notebook" for base in tqdm.__mro__)


def bar_format() -> str:
    """The bar's format for where it is drawn: one bar per run, a widget's or a terminal's."""
    return WIDGET_BAR_FORMAT if in_widget() else BAR_FORMAT


def redrawn(stream: TextIO | None = None) -> bool:
    """Whether a progress bar can redraw its line: in a notebook (a widget), or on a terminal."""
    if in_widget():
        return True
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def run_progress(label: str, enabled: bool = True) -> RunProgress | LineProgress:
    """A bar where it can be redrawn, else a line at each run's start and end."""
    return RunProgress(label, enabled) if redrawn() else LineProgress(label, enabled)


class Startup(NamedTuple):
    """A run's start-up, and what it was spent beside."""

    seconds: float
    beside: str  # "", "the last run", "the other runs" or `EARLIER_ROUND`


def startup_from(event: dict[str, Any], started: float) -> Startup:
    """A run's start-up when its training begins, and what it was spent beside: "" (nothing),
    "the last run" (started ahead, `runs/scheduling/started_ahead.StartedAhead`), "the other runs"
    (prepared with the comparison's other first rounds,
    `runs/scheduling/resident_rounds.prepared_together`), or `EARLIER_ROUND` (a later round, trained
    by an earlier round's process, `runs/scheduling/resident_rounds.py`).

    The caller's clock runs from when it began to follow the run; a run started ahead had set
    itself up before that, so its events arrive at once and that clock says 0.0 s. The worker's
    own figure is then the one shown, with where it was spent. A run prepared with the others
    says so even when the caller followed it from its start (the comparison's first). A later
    round has no start-up of its own to show: its process started for the first round.
    """
    seen = time.perf_counter() - started
    own = event.get("startup_s")
    if event.get("trained_in_process_of"):
        return Startup(float(own if own is not None else seen), EARLIER_ROUND)
    if own is not None and event.get("together"):
        return Startup(float(own), "the other runs")
    if own is not None and own > seen + AHEAD_MARGIN_S:
        return Startup(float(own), "the last run")
    return Startup(seen, "")


def startup_text(startup_s: float | None, beside: str = "") -> str:
    """ " · start-up 1.1 s", " · start-up 0.3 s beside the last run", " · in an earlier
    round's process", or nothing."""
    if beside == EARLIER_ROUND:
        return f" · in {EARLIER_ROUND}"
    if startup_s is None:
        return ""
    return f" · start-up {startup_s:.1f} s" + (f" beside {beside}" if beside else "")


def ending(result: RunResult, startup_s: float | None, beside: str = "") -> str:
    """ "ok · median step 4.2 ms · start-up 1.1 s", or the status a run ended with. A round
    trained by an earlier round's process (`runs/scheduling/resident_rounds.py`) had no start-up of
    its own."""
    if not result.ok:
        return result.status
    if "trained_in_process_of" in result.extra:
        beside = EARLIER_ROUND
    startup = startup_text(startup_s, beside)
    return f"ok · median step {(result.step_time_s or 0.0) * 1000:.1f} ms{startup}"


class LineProgress:
    """One line when the run starts and one when it ends, for output nothing redraws."""

    def __init__(self, label: str, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.label = label
        self.enabled = enabled
        self.stream = stream
        self.started = time.perf_counter()
        self.startup_s: float | None = None
        self.beside = ""  # what its start-up was spent beside
        self._say(f"{label}: started")

    def __call__(self, event: dict[str, Any]) -> None:
        if event.get("event") == "phase" and (event["phase"] == "training" or event.get("total")):
            self.startup_s, self.beside = startup_from(event, self.started)

    def close(self, result: RunResult) -> None:
        line = f"{self.label}: {ending(result, self.startup_s, self.beside)}"
        if not result.ok and result.reason:
            line += f": {result.reason}"
        self._say(wrapped(line))

    def _say(self, line: str) -> None:
        if self.enabled:
            print(line, file=self.stream or sys.stdout, flush=True)


class RunProgress:
    """Turns a worker's events into one bar: start-up phases first, then training steps."""

    def __init__(self, label: str, enabled: bool = True) -> None:
        self.label = label
        self.enabled = enabled
        self.started = time.perf_counter()
        self.startup_s: float | None = None
        self.beside = ""  # what its start-up was spent beside
        widget = enabled and in_widget()
        self.bar = tqdm(
            total=None,
            desc=label,
            unit="step",
            leave=True,
            disable=not enabled,
            dynamic_ncols=True,
            bar_format=START_FORMAT,
            **({"display": False} if widget else {}),
        )
        # A widget saved in a notebook is drawn by a kernel only: on the guide's pages, or in a
        # notebook opened before it runs, it is a broken icon. Shown under a display id, it
        # gives way to its last line, as text, when the run ends.
        self._shown = _display_updatable(self.bar.container) if widget else None
        self._phase("starting the worker")

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "phase":
            if event["phase"] == "training" or event.get("total"):
                self.startup_s, self.beside = startup_from(event, self.started)
                self.bar.bar_format = bar_format()
                self.bar.set_description_str(self.label, refresh=False)
                self.bar.reset(total=event.get("total") or self.bar.total)
                took = startup_text(self.startup_s, self.beside).removeprefix(" · ")
                self.bar.set_postfix_str(took, refresh=True)
            else:
                self._phase(event["phase"])
        elif kind == "progress":
            self.bar.update(event["step"] - self.bar.n)
            self.bar.set_postfix_str(
                f"{event['step_time_s'] * 1000:.1f} ms per step", refresh=False
            )

    def _phase(self, phase: str) -> None:
        self.bar.set_description_str(f"{self.label}: start-up: {phase}", refresh=True)

    def close(self, result: RunResult) -> None:
        if result.ok:
            self.bar.set_postfix_str(ending(result, self.startup_s, self.beside))
        elif self.startup_s is None:  # it ended during start-up
            self.bar.set_description_str(f"{self.label}: {result.status}", refresh=False)
        else:
            self.bar.set_postfix_str(result.status)
        self.bar.close()
        if self._shown is not None:
            line = f"{self.label}: {ending(result, self.startup_s, self.beside)}"
            self._shown.update({"text/plain": line}, raw=True)
            for widget in (*self.bar.container.children, self.bar.container):
                for part in (getattr(widget, "layout", None), getattr(widget, "style", None)):
                    if part is not None:
                        part.close()
                widget.close()  # its models freed in the kernel, where nothing draws them now
        if not result.ok and result.reason and self.enabled:
            tqdm.write(wrapped(f"  {self.label} {result.status}: {result.reason}", "    "))


def _display_updatable(widget: Any) -> Any:
    """`widget` displayed in the notebook; the handle that later replaces it."""
    from IPython.display import display  # in a kernel, where widgets are drawn

    return display(widget, display_id=True)


def run_label(spec: Any, round_of: tuple[int, int, str] | None = None) -> str:
    """A run's name on its progress line: "data×2 on jax (virtual) · round 2/3"."""
    label = strategy_record(spec.strategy).label(spec)
    label += "" if backend_record(spec.backend).default else f" on {spec.backend}"
    label += " (virtual)" if spec.devices.virtual else ""
    if round_of is not None:
        label += f" · round {round_of[0] + 1}/{round_of[1]}"
    return label
