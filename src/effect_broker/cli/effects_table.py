"""The ``effects list`` table, laid out to fit the terminal without losing anything.

Rich's own layout drops columns and cuts words in half when a table is wider than the
terminal (80 columns, or a pipe). Here the fixed columns (a short id, status, safety,
tries, age) keep their width, and the free text (route, operation key, last error)
shares what is left: each is wrapped at spaces and after separators such as ``-`` and
``:``, so words stay whole unless one alone is wider than its column.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.table import Table

SHORT_ID = 8  # hex digits of the UUID: unambiguous in any ledger a person scans
MIN_FLEX = 10
GAP = 1  # spaces between columns
FIXED = ("ID", "STATUS", "SAFETY", "TRIES", "AGE")
FLEXIBLE = ("ROUTE", "OPERATION KEY", "LAST ERROR")
ORDER = ("ID", "STATUS", "SAFETY", "ROUTE", "OPERATION KEY", "TRIES", "AGE", "LAST ERROR")
_BREAK_AFTER = re.compile(r"(?<=[-:/_.,;=@])|(?<=\s)(?=\S)")


def short_id(effect_id: str) -> str:
    return effect_id.replace("-", "")[:SHORT_ID]


def age(stamp: str | None, now: datetime) -> str:
    """How long ago, in the largest unit that fits: what a person scans a list for."""
    if not stamp:
        return "-"
    seconds = max(int((now - datetime.fromisoformat(stamp)).total_seconds()), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def wrap(text: str, width: int) -> str:
    """Lines of at most ``width``, broken at spaces or after separators; a piece wider
    than ``width`` on its own is folded, the only case that splits a word."""
    lines: list[str] = []
    line = ""
    for piece in (p for p in _BREAK_AFTER.split(text) if p):
        if len(line) + len(piece.rstrip()) <= width:
            line += piece
            continue
        if line.strip():
            lines.append(line.rstrip())
        line = piece.lstrip()
        while len(line.rstrip()) > width:
            lines.append(line[:width])
            line = line[width:]
    if line.strip() or not lines:
        lines.append(line.rstrip())
    return "\n".join(lines)


def _share(natural: Sequence[int], room: int) -> list[int]:
    """Widths for the flexible columns: each its natural width if all fit, else the
    narrow ones whole and the rest an equal share of what is left (water-filling)."""
    widths = [0] * len(natural)
    order = sorted(range(len(natural)), key=lambda i: natural[i])
    left = room
    for position, index in enumerate(order):
        fair = max(left // (len(natural) - position), MIN_FLEX)
        widths[index] = min(natural[index], fair)
        left -= widths[index]
    return widths


def rows_of(effects: Sequence[Mapping[str, Any]], now: datetime) -> list[dict[str, str]]:
    return [
        {
            "ID": short_id(effect["id"]),
            "STATUS": effect["status"],
            "SAFETY": effect["safety"],
            "ROUTE": effect["route"],
            "OPERATION KEY": effect["operation_key"],
            "TRIES": str(effect["attempts"]),
            "AGE": age(effect["created_at"], now),
            "LAST ERROR": effect["last_error"] or "",
        }
        for effect in effects
    ]


def effects_table(
    effects: Sequence[Mapping[str, Any]],
    width: int,
    style_of: Callable[[str], str | None],
    now: datetime | None = None,
) -> Table:
    """Every column of every effect, within ``width`` columns wherever possible."""
    rows = rows_of(effects, now or datetime.now(UTC))
    natural = {
        name: max([len(name), *(len(row[name]) for row in rows)]) for name in ORDER
    }
    room = width - sum(natural[name] for name in FIXED) - GAP * (len(ORDER) - 1)
    flexible = dict(
        zip(FLEXIBLE, _share([natural[name] for name in FLEXIBLE], room), strict=True)
    )
    widths = {**natural, **flexible}
    table = Table(
        box=None, padding=(0, GAP, 0, 0), pad_edge=False, show_edge=False, expand=False
    )
    for name in ORDER:
        table.add_column(
            wrap(name, widths[name]),
            width=widths[name],
            no_wrap=True,
            overflow="crop",
            justify="right" if name == "TRIES" else "left",
            header_style="bold",
        )
    for effect, row in zip(effects, rows, strict=True):
        table.add_row(
            *(wrap(row[name], widths[name]) for name in ORDER),
            style=style_of(effect["status"]),
        )
    return table
