"""The benchmarks' printed figures as text: a blank cell where a figure was not measured, and the
machine's load average, which every benchmark prints at its start and end."""

from __future__ import annotations

import os

MIB = 2**20


def number_cell(value: float | None, pattern: str, scale: float = 1.0) -> str:
    """`value * scale` written with `pattern` ("{:.2f}"), or "" where it was not measured."""
    return "" if value is None else pattern.format(value * scale)


def ratio_cell(numerator: float | None, denominator: float | None) -> str:
    """The ratio to two decimals, or "" where either side is missing or zero."""
    return f"{numerator / denominator:.2f}" if numerator and denominator else ""


def fraction_cell(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def mib_cell(value: int | None) -> str:
    return "" if value is None else f"{value / MIB:.2f} MiB"


def load_average() -> str:
    """The 1, 5 and 15 minute load averages: work beside a benchmark skews every figure."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())
