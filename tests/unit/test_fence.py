"""The send window: decided once, at the first byte, on the monotonic clock only."""

from __future__ import annotations

from datetime import timedelta

from effect_broker.engine.fence import SendWindow, WindowState

LEASE, GRACE = timedelta(seconds=10), timedelta(seconds=3)


def window_at(now: list[float], asked_at: float = 100.0) -> SendWindow:
    return SendWindow(asked_at, LEASE, GRACE, clock=lambda: now[0])


def test_the_window_closes_a_grace_before_the_earliest_end_of_the_lease() -> None:
    assert window_at([0.0]).closes_at == 107.0


def test_inside_the_window_the_first_byte_and_all_after_it_go_out() -> None:
    now = [106.9]
    window = window_at(now)
    assert window.admit()
    now[0] = 500.0  # a pause mid-body: the request is already on the wire
    assert window.admit()
    assert window.state is WindowState.OPEN and window.late_by() > 0


def test_past_the_window_nothing_goes_out_ever() -> None:
    now = [107.0]
    window = window_at(now)
    assert not window.admit()
    now[0] = 0.0  # even a clock that (impossibly) ran back changes nothing
    assert not window.admit()
    assert window.withheld


def test_asking_now_reads_the_clock_before_the_lease_is_asked_for() -> None:
    window = SendWindow.asking_now(LEASE, GRACE, clock=lambda: 50.0)
    assert window.closes_at == 57.0
