"""The panel's strategy options: one control per option a ticked strategy takes, with its help.

Each control is made from the strategy record's `Option` (its name, reader, choices and one line
of help), so an option added to a record appears in the panel as it does in `gpk` and `%gpk`: a
switch is a checkbox, an option with choices a dropdown, the mesh a dropdown of the shapes that
hold the picked devices, anything else a text box read by the option's own reader (its bad
value one sentence). A control shows only while a ticked strategy's record lists its option;
a hidden one hands the API its default, so a value set for a strategy no longer ticked never
reaches a run.

>>> options = StrategyOptions(Request(model="mlp", mesh=(2, 2)))  # doctest: +SKIP
>>> options.show(["tensor"], devices=4); options.values()["mesh"]  # doctest: +SKIP
(2, 2)
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import ipywidgets as widgets

from ..errors import GpkError
from ..options.request import Request
from ..strategies import Option, options, strategy_record
from ..strategies.option import mesh as mesh_reader
from ..strategies.processes import CLUSTER
from ..strategies.tensor import check_mesh

# Options the panel sets with controls of its own: the pipeline's schedule and micro-batches
# (with their auto box) and, through "where", the cluster.
OWN_CONTROLS = frozenset({"schedule", "micro_batches", CLUSTER.name})
# A dropdown's entry, and a text box's placeholder, for "the strategy's own rule decides": a
# value of its own, as a dropdown whose value is None shows no entry at all.
DEFAULT = "default"


@dataclass(frozen=True)
class MeshChoice:
    """One entry of the mesh dropdown: devices on the (data, model) axes."""

    data: int
    model: int

    @property
    def label(self) -> str:
        return f"{self.data}x{self.model}"


def mesh_shapes(devices: int) -> list[tuple[int, int]]:
    """Every (data, model) shape that holds exactly `devices` devices.

    >>> mesh_shapes(4)
    [(1, 4), (2, 2), (4, 1)]
    """
    return [(d, devices // d) for d in range(1, devices + 1) if devices % d == 0]


def panel_options() -> tuple[Option, ...]:
    """The options the panel offers controls for: every option with a text form, but those the
    panel sets elsewhere."""
    return tuple(o for o in options() if o.type is not None and o.name not in OWN_CONTROLS)


def _text(value: Any) -> str:
    """An option's value as its reader takes it back: (2, 2) -> '2x2', [3, 6] -> '3,6'."""
    if value is None:
        return ""
    if isinstance(value, tuple | list):
        return ",".join(str(part) for part in value)
    return str(value)


class OptionControl:
    """One option's control and its line of help; `value()` is what the API is handed."""

    def __init__(self, option: Option, value: Any) -> None:
        self.option = option
        layout = widgets.Layout(width="19em", flex="0 0 auto")
        style = {"description_width": "9em"}
        name = option.name.replace("_", " ")
        if option.switch:
            self.widget: widgets.Widget = widgets.Checkbox(
                value=bool(value), description=name, indent=False, layout=layout
            )
        elif option.type is mesh_reader:
            given = None if value is None else tuple(value)
            self.widget = widgets.Dropdown(
                options=[DEFAULT], value=DEFAULT, description=name, layout=layout, style=style
            )
            self._mesh = given
        elif option.choices:
            choices = [DEFAULT] if option.default is None else []
            choices += list(option.choices)
            current = value if value in option.choices else option.default or DEFAULT
            self.widget = widgets.Dropdown(
                options=choices, value=current, description=name, layout=layout, style=style
            )
        else:
            shown = _text(option.default) if option.default is not None else DEFAULT
            self.widget = widgets.Text(
                value="" if value == option.default else _text(value),
                placeholder=shown,
                description=name,
                layout=layout,
                style=style,
            )
        self.widget.add_class(f"gpk-option-{option.name.replace('_', '-')}")
        # One line under the control, from its box's left edge to the column's right one (beside
        # it, at 1,280 px, it had room for 20 characters): a Label cuts a long help with an
        # ellipsis, and its tooltip holds the whole.
        self.help = widgets.Label(layout=widgets.Layout(flex="1 1 auto", min_width="0"))
        self.help.add_class("gpk-help")
        self.help.style.font_size = "0.85em"
        self.help.style.text_color = "#555"
        indent = widgets.Box(layout=widgets.Layout(flex="0 0 9.5em"))  # under the input box
        line = widgets.HBox(
            [indent, self.help], layout=widgets.Layout(min_width="0", margin="-6px 0 2px 0")
        )
        self.row = widgets.VBox(
            [self.widget, line], layout=widgets.Layout(width="100%", min_width="0")
        )

    @property
    def is_mesh(self) -> bool:
        return self.option.type is mesh_reader

    def offer_meshes(self, devices: int) -> None:
        """The mesh dropdown's shapes: those that hold `devices`, and the value chosen before
        (kept even when it no longer fits, so the plan can say why in one sentence)."""
        chosen = self.widget.value if self.widget.options[1:] else self._mesh
        current = None if chosen == DEFAULT else chosen
        shapes = mesh_shapes(devices) if devices else []
        if current is not None and tuple(current) not in shapes:
            shapes.append(tuple(current))
        entries = [(DEFAULT, DEFAULT)] + [(MeshChoice(*s).label, s) for s in shapes]
        if list(self.widget.options) != entries:
            self.widget.options = entries
        self.widget.value = DEFAULT if current is None else tuple(current)

    def describe(self, owners: Iterable[str]) -> None:
        """One line of help: the option's own, as each ticked strategy that takes it says it."""
        helps: dict[str, list[str]] = {}
        for name in owners:
            own = next(o for o in strategy_record(name).options if o.name == self.option.name)
            helps.setdefault(own.help, []).append(name)
        # Whose help it is matters only where the strategies word it differently (the mesh).
        whose = len(helps) > 1
        text = "; ".join(
            f"{' and '.join(names)}: {help}" if whose else help for help, names in helps.items()
        )
        self.help.value = text
        self.help.tooltip = text
        self.widget.tooltip = text

    def value(self) -> Any:
        """The API's value: a text box read by the option's reader, an empty one the default."""
        if not isinstance(self.widget, widgets.Text):
            return None if self.widget.value == DEFAULT else self.widget.value
        text = self.widget.value.strip()
        if not text:
            return self.option.default
        try:
            return self.option.type(text, name=self.option.name)
        except argparse.ArgumentTypeError as error:
            box = self.option.name.replace("_", " ")
            raise GpkError(f"{error}; correct the {box} box") from None


class StrategyOptions:
    """A control per strategy option, shown while a ticked strategy takes it."""

    def __init__(self, request: Request) -> None:
        self.controls = {
            option.name: OptionControl(option, getattr(request, option.name))
            for option in panel_options()
        }
        self.widget = widgets.VBox(
            [control.row for control in self.controls.values()],
            layout=widgets.Layout(width="100%", min_width="0"),
        )
        self.widget.add_class("gpk-strategy-options")

    def show(self, strategies: Iterable[str], devices: int, backends: Sequence[str] = ()) -> None:
        """Show the controls the ticked `strategies` take on one of `backends` (every backend
        where none is given), each with their help; the mesh offers the shapes of `devices`."""
        ticked = [strategy_record(name) for name in strategies]
        for control in self.controls.values():
            taken = not backends or any(control.option.taken_on(b) for b in backends)
            owners = [r.name for r in ticked if control.option.name in r.option_names()]
            owners = owners if taken else []
            control.row.layout.display = None if owners else "none"
            if owners:
                control.describe(owners)
            if control.is_mesh:
                control.offer_meshes(devices)

    def shown(self) -> list[str]:
        """The options whose controls are shown."""
        return [name for name, c in self.controls.items() if c.row.layout.display != "none"]

    def values(self, counts: Sequence[int] = ()) -> dict[str, Any]:
        """The API's keywords: each shown control's value, a hidden one's default. A mesh that
        holds none of the device `counts` a click runs on is one sentence, before anything
        runs."""
        shown = set(self.shown())
        values = {}
        for name, control in self.controls.items():
            values[name] = control.value() if name in shown else control.option.default
            mesh = values[name] if control.is_mesh else None
            if mesh is not None and counts and mesh[0] * mesh[1] not in counts:
                check_mesh(mesh, max(counts))
        return values
