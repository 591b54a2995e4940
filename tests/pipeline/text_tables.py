"""Plain-text tables read back as cells, so tests assert on what a table says, not its spacing."""

from __future__ import annotations

import re


def grid_cells(text: str) -> list[list[str]]:
    """Each line's cells, cut where the header's left-aligned columns start ("" is empty).

    Header cells are at least two spaces apart and may hold one space, as in "stage 0".
    """
    lines = text.splitlines()
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", lines[0])]
    ends = [*starts[1:], None]
    return [[line[a:b].strip() for a, b in zip(starts, ends, strict=True)] for line in lines]
