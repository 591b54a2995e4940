"""What a projected row says of its compute when its step could not be counted.

Such a projection runs on the step time measured here, which a GPU would beat by far, so its
rows, the figures' titles and the advice say "compute measured on this CPU, not counted" where
a reader sees them. Imports nothing, so the figures and the tables can ask it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

NOT_COUNTED = "compute measured on this {kind}, not counted"
_NOT_COUNTED = re.compile(NOT_COUNTED.format(kind=r"\w+"))


def not_counted(kind: str) -> str:
    """ "compute measured on this CPU, not counted", for runs measured on a `kind` device."""
    return NOT_COUNTED.format(kind=kind.upper())


def uncounted(reasons: Iterable[Any]) -> str:
    """The words of the first reason that says its compute was not counted, else ""."""
    for reason in reasons:
        found = _NOT_COUNTED.search(reason) if isinstance(reason, str) else None
        if found:
            return found.group(0)
    return ""
