"""Failpoints: what an entry of ``EFFECT_BROKER_FAILPOINTS`` arms (the two actions in
a real process are tests/integration/test_failpoint_processes.py)."""

from __future__ import annotations

import random

import pytest

from effect_broker import failpoints


def test_a_bare_name_exits_at_every_hit() -> None:
    (arming,) = failpoints.parse(" before_upstream_send ").values()
    assert arming == failpoints.Arming(failpoints.EXIT, every=1, probability=1.0)
    rng = random.Random(1)
    assert [arming.fires(rng) for _ in range(3)] == [True, True, True]


def test_stop_every_third_hit_acts_on_the_third_and_sixth() -> None:
    armed = failpoints.parse("after_reserve,before_upstream_send:stop:every=3")
    assert set(armed) == {failpoints.AFTER_RESERVE, failpoints.BEFORE_UPSTREAM_SEND}
    arming = armed[failpoints.BEFORE_UPSTREAM_SEND]
    assert arming.action == failpoints.STOP
    rng = random.Random(1)
    assert [arming.fires(rng) for _ in range(6)] == [False, False, True] * 2


def test_a_probability_lets_some_hits_pass() -> None:
    arming = failpoints.parse("before_upstream_send:stop:p=0.5")["before_upstream_send"]
    rng = random.Random(7)
    fired = sum(arming.fires(rng) for _ in range(400))
    assert 120 < fired < 280


@pytest.mark.parametrize(
    "raw,says",
    [
        ("before_upstream_sned", "unknown failpoints"),
        ("before_upstream_send:freeze", "cannot read 'freeze'"),
        ("before_upstream_send:stop:every=0", "cannot read 'every=0'"),
        ("before_upstream_send:stop:p=1.5", "cannot read 'p=1.5'"),
        ("before_upstream_send:p=x", "cannot read 'p=x'"),
    ],
)
def test_an_unreadable_entry_is_refused_by_name(raw: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        failpoints.parse(raw)


def test_an_arming_reads_back_as_its_entry() -> None:
    armed = failpoints.parse("before_upstream_send:stop:every=3,after_reserve")
    assert [plan.describe(name) for name, plan in sorted(armed.items())] == [
        "after_reserve:exit",
        "before_upstream_send:stop:every=3",
    ]
    probable = failpoints.parse("before_upstream_send:stop:p=0.25")
    assert probable["before_upstream_send"].describe("x") == "x:stop:p=0.25"
