"""The demo's record in plain words: who did what, one line each, as it happens."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Transcript:
    """Lines of ``speaker: words``, kept and passed on to ``show`` (a console, a log)."""

    show: Callable[[str], None] = lambda line: None
    lines: list[str] = field(default_factory=list)

    def say(self, speaker: str, words: str) -> None:
        line = f"{speaker:>7}: {words}"
        self.lines.append(line)
        self.show(line)

    def text(self) -> str:
        return "\n".join(self.lines)
