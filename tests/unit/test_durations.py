from __future__ import annotations

from datetime import timedelta

import pytest

from effect_broker.config.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500ms", timedelta(milliseconds=500)),
        ("2s", timedelta(seconds=2)),
        ("10m", timedelta(minutes=10)),
        ("24h", timedelta(hours=24)),
        ("7d", timedelta(days=7)),
        ("90s", timedelta(seconds=90)),
    ],
)
def test_parses_one_integer_and_one_unit(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "0s", "10", "1.5h", "1h30m", "-1s", "2 s", " 2s", "2S", "01s", "2w", "s", "ms"],
)
def test_refuses_anything_else_with_the_expected_syntax(text: str) -> None:
    with pytest.raises(ValueError, match="positive integer and one unit"):
        parse_duration(text)


def test_refuses_non_strings() -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(10)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(milliseconds=500), "500ms"),
        (timedelta(seconds=2), "2s"),
        (timedelta(seconds=90), "90s"),
        (timedelta(minutes=10), "10m"),
        (timedelta(hours=36), "36h"),
        (timedelta(days=7), "7d"),
        (timedelta(milliseconds=1500), "1500ms"),
    ],
)
def test_format_is_the_shortest_exact_spelling(value: timedelta, text: str) -> None:
    assert format_duration(value) == text
    assert parse_duration(format_duration(value)) == value
