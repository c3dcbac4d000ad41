"""doctor's key-scope judgement: which routes' keys look minted per call (pure)."""

from __future__ import annotations

from datetime import timedelta

from effect_broker.cli.doctor_scope import (
    KeyUsage,
    payload_conflicts,
    stuck_routes,
    suspect_routes,
)

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


METRICS = """\
# HELP effect_broker_payload_conflicts_total Operation keys reused ...
# TYPE effect_broker_payload_conflicts_total counter
effect_broker_payload_conflicts_total{route="charge"} 40.0
effect_broker_payload_conflicts_total{route="odd \\"name\\""} 3.0
effect_broker_payload_conflicts_created{route="charge"} 1.7e+09
"""


def test_conflicts_are_read_by_route_from_a_metrics_page() -> None:
    assert payload_conflicts(METRICS) == {"charge": 40.0, 'odd "name"': 3.0}


def test_a_key_is_stuck_when_refusals_outnumber_effects() -> None:
    usages = [KeyUsage("charge", 2, 2), KeyUsage("orders", 500, 500)]
    conflicts = {"charge": 40.0, "orders": 30.0, "rare": 2.0}
    (note,) = stuck_routes(conflicts, usages)
    assert note.route == "charge"
    assert "40 requests reused an operation key" in note.detail
