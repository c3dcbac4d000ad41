"""Wide tables in a narrow terminal: one block per row instead of folded words.

rich squeezes a wide table into 80 columns by folding cells mid-word ("paymen/ts.inte/
rnal"), which nobody can read or copy. Below the width a table needs, each row is
printed as a block instead: its first cell as a heading, then one ``column: value``
line per other cell, wrapped between words.
"""

from __future__ import annotations

import textwrap

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text


def _plain(cell: RenderableType) -> str:
    if isinstance(cell, Text):
        return cell.plain
    return Text.from_markup(str(cell)).plain


def as_blocks(table: Table, width: int) -> Group:
    """``table`` as one block per row, wrapped to ``width``."""
    columns = table.columns
    rows = list(zip(*(list(column.cells) for column in columns), strict=True))
    lines: list[Text] = []
    if table.title:
        lines.append(Text(_plain(table.title), style="bold"))
    for row in rows:
        first, *rest = (_plain(cell) for cell in row)
        lines.append(Text(f"  {first}", style="bold"))
        for column, value in zip(columns[1:], rest, strict=True):
            text = f"{_plain(column.header)}: {value}"
            for line in textwrap.wrap(
                text, width, initial_indent="    ", subsequent_indent="      "
            ):
                lines.append(Text(line))
    return Group(*lines)


def fitted(console: Console, table: Table, *, needs: int) -> RenderableType:
    """The table where it fits (``needs`` columns), else its blocks."""
    return table if console.width >= needs else as_blocks(table, console.width)
