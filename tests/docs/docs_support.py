"""The fenced code blocks of a documentation page, with what the page says to do
with each (shared by the docs tests).

A page marks a block with an HTML comment on the line right above its fence, visible
in the page's source and invisible on the site:

- ``<!-- docs-test: skip: REASON -->``: not executed, for the reason given (a cluster,
  the network, a command that serves until stopped);
- ``<!-- docs-test: background until "TEXT" -->``: started in the background, and the
  next block runs once TEXT appears in its output;
- no comment, or ``<!-- docs-test: run ... -->``: executed, and must exit 0.

Only shell (``sh``, ``bash``) and Python blocks are executed; YAML, JSON and other
languages are configuration shown to the reader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

EXECUTABLE = {"sh": "shell", "bash": "shell", "python": "python"}
MARKER = re.compile(r"^\s*<!-- docs-test: (?P<order>.*?) -->\s*$")
BACKGROUND = re.compile(r'^background until "(?P<text>[^"]+)"$')


class Action(StrEnum):
    RUN = "run"
    SKIP = "skip"
    BACKGROUND = "background"


@dataclass(frozen=True)
class Snippet:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str  # "shell" or "python"
    code: str
    action: Action
    reason: str = ""  # why a block is skipped
    ready_text: str = ""  # what a background block prints once it is ready

    @property
    def where(self) -> str:
        return f"{self.page.name}:{self.line}"


def _action(order: str | None, where: str) -> tuple[Action, str, str]:
    if order is None or order == "run" or order.startswith("run "):
        return Action.RUN, "", ""
    if order.startswith("skip:"):
        reason = order.removeprefix("skip:").strip()
        if not reason:
            raise ValueError(f"{where}: a skipped block must say why")
        return Action.SKIP, reason, ""
    background = BACKGROUND.match(order)
    if background:
        return Action.BACKGROUND, "", background["text"]
    raise ValueError(f"{where}: unknown docs-test order {order!r}")


def snippets(page: Path) -> list[Snippet]:
    """Every shell and Python block of ``page``, in order."""
    lines = page.read_text().split("\n")
    found: list[Snippet] = []
    index = 0
    while index < len(lines):
        stripped = lines[index].lstrip()
        if not stripped.startswith("```"):
            index += 1
            continue
        indent = len(lines[index]) - len(stripped)
        info = stripped[3:].strip().split()
        start = index
        index += 1
        body: list[str] = []
        while index < len(lines) and not lines[index].lstrip().startswith("```"):
            body.append(lines[index][indent:])
            index += 1
        index += 1  # the closing fence
        language = EXECUTABLE.get(info[0] if info else "")
        if language is None:
            continue
        above = MARKER.match(lines[start - 1]) if start else None
        where = f"{page.name}:{start + 1}"
        action, reason, ready = _action(above["order"] if above else None, where)
        found.append(
            Snippet(page, start + 1, language, "\n".join(body), action, reason, ready)
        )
    return found
