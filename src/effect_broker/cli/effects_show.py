"""How one effect reads at a terminal: its fields, its request and its history.

Kept apart from the ``effects`` commands so that the commands say what is asked of the
admin API and this module alone decides how the answer looks (the status colours are
shared with ``effects list``'s table).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

# Effects that wait on proof or a person must stand out in every listing.
STATUS_STYLES: Mapping[str, str] = {
    "outcome_unknown": "bold red",
    "manual_review": "yellow",
    "succeeded": "green",
    "failed_final": "dim",
}


def status_text(status: str) -> Text:
    return Text(status, style=STATUS_STYLES.get(status, ""))


def clock(stamp: str) -> str:
    """A UTC wall-clock time to the millisecond: enough to read a history in order."""
    moment = datetime.fromisoformat(stamp).astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def details_line(details: Mapping[str, Any]) -> str:
    if not details:
        return ""
    return json.dumps(details, separators=(", ", ": "), ensure_ascii=False)


def print_history(out: Console, events: Sequence[Mapping[str, Any]]) -> None:
    """One event per line (sequence, time, kind, status change), then who wrote it and
    its details indented beneath: readable at 80 columns, where a table of seven
    columns folds every cell into slivers. The date is printed when it changes."""
    out.print(Text("History (UTC)", style="bold"))
    day = None
    for event in events:
        stamp = clock(event["occurred_at"])
        if stamp[:10] != day:
            day = stamp[:10]
            out.print(Text(f"  {day}", style="dim"))
        line = Text(f"{event['seq']:>4}  {stamp[11:]}  ")
        line.append(f"{event['kind']:<16} ", style="bold")
        line.append(f"{event['from'] or '-'} -> ")
        line.append_text(status_text(event["to"]))
        out.print(line, overflow="fold")
        beneath = Text(f"by {event['actor']}", style="dim")
        if event["details"]:
            beneath.append("  " + details_line(event["details"]))
        out.print(Padding(beneath, (0, 0, 0, 6)), overflow="fold")


def print_effect(out: Console, effect: Mapping[str, Any]) -> None:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    rows: list[tuple[str, str | Text | None]] = [
        ("id", effect["id"]),
        ("status", status_text(effect["status"])),
        ("operation key", effect["operation_key"]),
        ("route", effect["route"]),
        ("contract", f"{effect['contract']} ({effect['safety']})"),
        ("attempts", str(effect["attempts"])),
        ("version", str(effect["version"])),
        ("created", effect["created_at"]),
        ("updated", effect["updated_at"]),
        ("due", effect.get("due_at")),
        ("lease", effect.get("lease_owner")),
        ("lease expires", effect.get("lease_expires_at")),
        ("retention until", effect.get("retention_deadline")),
        ("settlement after", effect.get("settlement_deadline")),
        ("downstream key", effect.get("downstream_key")),
        ("last error", effect.get("last_error")),
        ("request", details_line(effect.get("request_preview") or {})),
    ]
    for label, value in rows:
        if value:
            grid.add_row(label, value)
    out.print(grid)


def print_request(out: Console, shown: dict[str, Any] | None) -> None:
    """What the client sent, credentials hidden: what to look for at the target."""
    out.print(Text("Request", style="bold"))
    if shown is None:
        out.print("  (cannot be opened with this broker's master keys)")
        out.print()
        return
    out.print(Text(f"  {shown['method']} {shown['url']}"))
    for name, value in shown["headers"]:
        out.print(Text(f"  {name}: {value}"))
    out.print()
    for line in shown["body"].splitlines():
        out.print(Text(f"  {line}"))
    if shown["redacted"]:
        out.print(Text(f"  hidden: {', '.join(shown['redacted'])}", style="dim"))
    out.print()
