"""doctor's key-scope judgement: which routes' keys look minted per call (pure)."""

from __future__ import annotations

from datetime import timedelta

from effect_broker.cli.doctor_scope import KeyUsage, suspect_routes

DAY = timedelta(hours=24)


def test_many_equal_requests_under_new_keys_are_suspect() -> None:
    (note,) = suspect_routes([KeyUsage("charge", 50, 10)], DAY)
    assert note.route == "charge"
    assert "40 of 50 effects in the last 1d" in note.detail


def test_distinct_requests_and_small_samples_are_not() -> None:
    usages = [
        KeyUsage("orders", 100, 95),  # 5% repeats: equal orders happen
        KeyUsage("tiny", 9, 1),  # too few effects to judge
        KeyUsage("edge", 10, 8),  # exactly at the threshold: 20%
    ]
    assert [n.route for n in suspect_routes(usages, DAY)] == ["edge"]
