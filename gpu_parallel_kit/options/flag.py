"""One flag of `gpk` and `%gpk`: its type, default and help, and the API argument it sets.

The rows themselves are in `table.py` (training, with every strategy's options read from its
record through `Flag.of_strategies`), `plan.py` (the memory planner) and `projection.py`; both
front ends build their parsers from them.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..api import Experiment
from ..strategies import Option, option_owners

_FROM_API = object()  # the default is the API's own: read from the signature of `api_call`


@dataclass(frozen=True)
class Flag:
    """One command-line flag and the API argument it sets.

    >>> option = Flag("--batch-size", "global batch; default: %(default)s")
    >>> option.name, option.api_default
    ('batch_size', 256)
    """

    flag: str  # e.g. "--batch-size"
    help: str  # may use %(default)s, which argparse fills in
    goes_to: str = "experiment"  # experiment: Experiment(...); plan: run/compare(...); front end
    type: Callable[[str], Any] | None = None  # a reader from options.argtypes
    choices: Sequence[str] | None = None
    metavar: str | None = None
    nargs: str | None = None
    action: str | None = None  # "store_true" / "store_false" for switches
    dest: str | None = None  # the attribute name, when it is not the flag's
    default: Any = _FROM_API
    scale: int = 1  # the API takes flag value × scale (MiB on the command line, bytes in the API)
    api_call: Callable[..., Any] | None = None  # whose signature holds the default

    @classmethod
    def of_strategies(cls, option: Option) -> Flag:
        """The flag of a strategy's option, its help prefixed by the strategies that take it
        ("tensor and fsdp: ..."), its default the API's (the record's)."""
        owners = option_owners(option.name)
        helps = {}
        for record in owners:
            own = next(o for o in record.options if o.name == option.name).help
            helps.setdefault(own, []).append(record.name)
        text = "; ".join(f"{' and '.join(names)}: {help}" for help, names in helps.items())
        text = text.replace("%", "%%")  # argparse formats help with %
        if option.default is not None and not option.switch:
            text += "; default: %(default)s"
        switch = option.switch
        return cls(
            option.flag,
            text,
            goes_to="plan",
            type=None if switch or option.type is str else option.type,
            choices=option.choices or None,
            metavar=option.metavar,
            action=("store_false" if option.default else "store_true") if switch else None,
            dest=option.name if switch else None,
        )

    @property
    def name(self) -> str:
        return self.dest or self.flag.lstrip("-").replace("-", "_")

    @property
    def api_default(self) -> Any:
        """The default in the API's units (bytes, not MiB)."""
        if self.default is not _FROM_API:
            return self.default
        if self.action == "store_true":
            return False
        call = self.api_call or (
            Experiment.__init__ if self.goes_to == "experiment" else Experiment.plan
        )
        value = inspect.signature(call).parameters[self.name].default
        if value is inspect.Parameter.empty or value is ...:
            raise AssertionError(f"{call.__qualname__} has no default for {self.name}")
        return value

    @property
    def resolved_default(self) -> Any:
        """The default in the flag's units, as the help shows it."""
        value = self.api_default
        if self.scale != 1 and value is not None:
            value //= self.scale
        return list(value) if isinstance(value, tuple) else value

    def parser_arguments(self) -> tuple[tuple[str, ...], dict[str, Any]]:
        """The positional and keyword arguments of `add_argument` (and of `magic_arguments`'s
        `argument`, which takes the same)."""
        kwargs: dict[str, Any] = {"help": self.help, "default": self.resolved_default}
        if self.type is not None:
            # A bad value names its option, e.g. "epochs=0 is not a positive whole number".
            kwargs["type"] = functools.partial(self.type, name=self.name)
        for key in ("choices", "metavar", "nargs", "action", "dest"):
            if (value := getattr(self, key)) is not None:
                kwargs[key] = list(value) if key == "choices" else value
        return (self.flag,), kwargs

    def to_api(self, value: Any) -> Any:
        return value * self.scale if self.scale != 1 and value is not None else value
