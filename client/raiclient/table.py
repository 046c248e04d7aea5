"""Tables at the terminal's width on the standard library (the one-file client has no rich): the
columns named in ``drop`` (least useful first) are left out while the table is wider than the
terminal; a value wider than what is left wraps (folds) within its column, never cut, so an id or
an op time copied from it is whole."""

from __future__ import annotations

import shutil
import sys
import textwrap
from collections.abc import Sequence

from .output import coloured

# light box lines: top, header rule, bottom (left, fill, join, right) and the cell separator
BOX = {"top": "┌─┬┐", "rule": "├─┼┤", "bottom": "└─┴┘"}
BAR = "│"


def width() -> int:
    """The terminal's columns (COLUMNS wins; 80 when stdout is a file or a pipe)."""
    return shutil.get_terminal_size((80, 24)).columns


def _widths(rows: list[list[str]]) -> list[int]:
    return [max((len(line) for row in rows for line in row[i].split("\n")), default=0) for i in range(len(rows[0]))]


def _total(widths: list[int], box: bool) -> int:
    return sum(widths) + (3 * len(widths) + 1 if box else 2 * (len(widths) - 1))


def _fold(widths: list[int], limit: int, box: bool) -> list[int]:
    """Narrow the widest columns until the table fits (no column under 4)."""
    widths = list(widths)
    while _total(widths, box) > limit:
        widest = max(range(len(widths)), key=lambda i: widths[i])
        if widths[widest] <= 4:
            break
        widths[widest] -= 1
    return widths


def _cell_lines(text: str, w: int) -> list[str]:
    lines: list[str] = []
    for part in text.split("\n"):
        lines += textwrap.wrap(part, w, break_long_words=True, break_on_hyphens=False) or [""]
    return lines


def render(columns: Sequence[str], rows: Sequence[Sequence[str]], drop: Sequence[str] = (), box: bool = False, header: bool = True) -> str:
    """The table as text, each line within the terminal's width where it can be."""
    limit = width()
    index = list(range(len(columns)))  # by place: two columns may share a name (a pair's "team", "team")
    table: list[list[str]] = []
    for gone in (None, *drop):
        index = [i for i in index if columns[i] != gone]
        table = ([[columns[i] for i in index]] if header else []) + [[str(row[i]) for i in index] for row in rows]
        if not table or _total(_widths(table), box) <= limit:
            break
    if not table:
        return ""
    widths = _fold(_widths(table), limit, box)
    bold = coloured(sys.stdout)
    out: list[str] = []

    def rule(kind: str) -> None:
        left, fill, join, right = BOX[kind][0], BOX[kind][1], BOX[kind][2], BOX[kind][3]
        out.append(left + join.join(fill * (w + 2) for w in widths) + right)

    if box:
        rule("top")
    for n, row in enumerate(table):
        cells = [_cell_lines(text, w) for text, w in zip(row, widths, strict=True)]
        for k in range(max(len(c) for c in cells)):
            parts = [(c[k] if k < len(c) else "").ljust(w) for c, w in zip(cells, widths, strict=True)]
            if header and n == 0 and bold:
                parts = [f"\x1b[1m{p}\x1b[0m" for p in parts]
            out.append(f"{BAR} " + f" {BAR} ".join(parts) + f" {BAR}" if box else "  ".join(parts).rstrip())
        if box and header and n == 0:
            rule("rule")
    if box:
        rule("bottom")
    return "\n".join(out) + "\n"


def show(columns: Sequence[str], rows: Sequence[Sequence[str]], drop: Sequence[str] = (), box: bool = False, title: str = "") -> None:
    """Print the table (and its title above it)."""
    sys.stdout.write((title + "\n" if title else "") + render(columns, rows, drop, box))
    sys.stdout.flush()


def pairs(rows: Sequence[tuple[str, str]], gap: int = 2) -> None:
    """Name/value lines, the values aligned (``status``): the value wraps under itself, never cut."""
    if not rows:
        return
    name_w = max(len(name) for name, _ in rows)
    room = max(width() - name_w - gap, 20)
    lines = []
    for name, value in rows:
        wrapped = _cell_lines(value, room)
        lines.append(f"{name.ljust(name_w)}{' ' * gap}{wrapped[0]}".rstrip())
        lines += [f"{' ' * (name_w + gap)}{more}".rstrip() for more in wrapped[1:]]
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
