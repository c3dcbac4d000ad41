"""RateLimitedLog: one line per cause per interval, then a count of what it held back."""

from __future__ import annotations

import logging

import pytest

from effect_broker.ratelimited_log import RateLimitedLog


def test_one_line_per_cause_per_interval_with_the_suppressed_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    limited = RateLimitedLog(logging.getLogger("t.ratelimit"), 10.0, lambda: now[0])
    caplog.set_level(logging.INFO, "t.ratelimit")

    written = [limited.error("store", "down: %s", i) for i in range(5)]
    other = limited.error("accept", "no descriptors")
    now[0] += 10.0
    later = limited.error("store", "down: %s", "again")

    assert written == [True, False, False, False, False]
    assert other and later
    assert [r.getMessage() for r in caplog.records] == [
        "down: 0",
        "no descriptors",
        "down: again (4 similar lines suppressed in the last 10 s)",
    ]
    assert all(r.levelno == logging.ERROR for r in caplog.records)


def test_the_causes_it_remembers_are_capped_least_recent_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    limited = RateLimitedLog(
        logging.getLogger("t.ratelimit"), 10.0, lambda: now[0], max_causes=3
    )
    caplog.set_level(logging.INFO, "t.ratelimit")

    for cause in ("a", "b", "c", "a", "d"):  # "a" seen again: "b" is the oldest
        limited.warning(cause, "line %s", cause)
    held = [limited.warning(cause, "again %s", cause) for cause in ("a", "b")]

    assert len(limited) == 3
    # "a" is still within its interval; "b" was forgotten, so its line comes through.
    assert held == [False, True]
    assert [r.getMessage() for r in caplog.records] == [
        "line a",
        "line b",
        "line c",
        "line d",
        "again b",
    ]
