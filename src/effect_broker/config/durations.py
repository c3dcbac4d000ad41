"""Durations as written in routes.yaml: ``500ms``, ``2s``, ``10m``, ``24h``, ``7d``.

Retention horizons and settlement bounds decide whether a redispatch is safe, so the
syntax is deliberately narrow: one positive integer and one unit, nothing else. ``1.5h``,
``90`` (which unit?) or ``1h30m`` are refused rather than guessed.
"""

from __future__ import annotations

import re
from datetime import timedelta

_UNITS: dict[str, timedelta] = {
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
}
# Also published in routes.schema.json, so editors refuse what this module refuses.
DURATION_PATTERN = r"^([1-9][0-9]*)(ms|s|m|h|d)$"
_DURATION = re.compile(DURATION_PATTERN)
_EXPECTED = (
    "expected a positive integer and one unit of ms, s, m, h, d (e.g. 500ms, 2s, 24h)"
)


def parse_duration(text: str) -> timedelta:
    """Parse ``text`` strictly; the ``ValueError`` message is fit for a config issue."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a duration: {_EXPECTED}")
    found = _DURATION.fullmatch(text)
    if found is None:
        raise ValueError(f"{text!r} is not a duration: {_EXPECTED}")
    return int(found.group(1)) * _UNITS[found.group(2)]


def format_duration(value: timedelta) -> str:
    """The shortest exact spelling in this syntax, so tables read like the file."""
    total_ms = value // timedelta(milliseconds=1)
    if total_ms <= 0 or value != timedelta(milliseconds=total_ms):
        return str(value)
    for unit in ("d", "h", "m", "s", "ms"):
        step = _UNITS[unit] // timedelta(milliseconds=1)
        if total_ms % step == 0:
            return f"{total_ms // step}{unit}"
    raise AssertionError("unreachable: every whole millisecond count divides by 1ms")
