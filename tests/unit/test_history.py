"""Folding an effect's event history into its state at any sequence."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest

from effect_broker.errors import EffectBrokerError
from effect_broker.history import BrokenHistory, HistoryState, fold_events
from effect_broker.models import EffectEvent
from effect_broker.models import EffectStatus as S

EFFECT_ID = UUID("00000000-0000-4000-8000-000000000001")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def event(
    seq: int, kind: str, from_status: S | None, to_status: S, actor: str = "proxy-1"
) -> EffectEvent:
    return EffectEvent(
        effect_id=EFFECT_ID,
        seq=seq,
        kind=kind,
        from_status=from_status,
        to_status=to_status,
        actor=actor,
        details={},
        occurred_at=at(seq),
        prev_digest=b"",
        digest=b"",
    )


# A lost response, an idempotent redispatch, then success; with a lease claim in between.
HISTORY: list[EffectEvent] = [
    event(1, "reserved", None, S.PREPARED),
    event(2, "dispatch", S.PREPARED, S.DISPATCHING),
    event(3, "response_lost", S.DISPATCHING, S.OUTCOME_UNKNOWN),
    event(4, "claimed", S.OUTCOME_UNKNOWN, S.OUTCOME_UNKNOWN, actor="reconciler-7"),
    event(5, "dispatch", S.OUTCOME_UNKNOWN, S.DISPATCHING, actor="reconciler-7"),
    event(6, "response", S.DISPATCHING, S.SUCCEEDED, actor="reconciler-7"),
]


def test_the_latest_state_by_default() -> None:
    assert fold_events(HISTORY) == HistoryState(
        seq=6,
        status=S.SUCCEEDED,
        attempts=2,
        last_kind="response",
        last_actor="reconciler-7",
        occurred_at=at(6),
    )


def test_the_state_at_an_earlier_sequence() -> None:
    assert fold_events(HISTORY, at_sequence=3) == HistoryState(
        seq=3,
        status=S.OUTCOME_UNKNOWN,
        attempts=1,
        last_kind="response_lost",
        last_actor="proxy-1",
        occurred_at=at(3),
    )


def test_at_the_last_sequence_is_the_latest() -> None:
    assert fold_events(HISTORY, at_sequence=6) == fold_events(HISTORY)


def test_the_reservation_alone() -> None:
    state = fold_events(HISTORY[:1])
    assert (state.seq, state.status, state.attempts) == (1, S.PREPARED, 0)
    assert state.last_kind == "reserved"


@pytest.mark.parametrize(
    ("at_sequence", "status", "attempts"),
    [
        (1, S.PREPARED, 0),
        (2, S.DISPATCHING, 1),
        (3, S.OUTCOME_UNKNOWN, 1),
        (4, S.OUTCOME_UNKNOWN, 1),
        (5, S.DISPATCHING, 2),
        (6, S.SUCCEEDED, 2),
    ],
)
def test_attempts_count_dispatch_events_only(
    at_sequence: int, status: S, attempts: int
) -> None:
    state = fold_events(HISTORY, at_sequence=at_sequence)
    assert (state.seq, state.status, state.attempts) == (at_sequence, status, attempts)


def test_a_move_into_dispatching_under_another_kind_is_not_an_attempt() -> None:
    # Attempts follow the event kind the store writes for start_attempt, not the status.
    events = [
        event(1, "reserved", None, S.PREPARED),
        event(2, "operator_requeue", S.PREPARED, S.DISPATCHING),
    ]
    assert fold_events(events).attempts == 0


def test_an_earlier_state_ignores_what_came_later() -> None:
    events = [*HISTORY[:3], event(4, "dispatch", S.OUTCOME_UNKNOWN, S.DISPATCHING)]
    assert fold_events(events, at_sequence=3) == fold_events(HISTORY, at_sequence=3)


def test_a_gap_in_the_sequence_names_the_missing_event() -> None:
    events = [event for event in HISTORY if event.seq != 4]
    with pytest.raises(BrokenHistory, match=r"event 4 is missing \(found 5\)"):
        fold_events(events)


def test_a_history_that_does_not_start_at_one_is_broken() -> None:
    with pytest.raises(BrokenHistory, match="event 1 is missing"):
        fold_events(HISTORY[1:])


def test_a_duplicated_event_is_broken() -> None:
    events = [*HISTORY[:3], HISTORY[2], *HISTORY[3:]]
    with pytest.raises(BrokenHistory, match="event 4 is missing"):
        fold_events(events)


def test_an_inconsistent_from_status_is_broken() -> None:
    events = list(HISTORY)
    events[3] = replace(events[3], from_status=S.RECONCILING)
    with pytest.raises(BrokenHistory, match="event 4 moves from reconciling") as caught:
        fold_events(events)
    assert "outcome_unknown" in str(caught.value)


def test_the_first_event_must_come_from_nothing() -> None:
    events = [replace(HISTORY[0], from_status=S.PREPARED), *HISTORY[1:]]
    with pytest.raises(BrokenHistory, match="event 1 moves from prepared"):
        fold_events(events)


def test_an_empty_history_is_broken() -> None:
    with pytest.raises(BrokenHistory):
        fold_events([])


@pytest.mark.parametrize("at_sequence", [7, 100])
def test_a_sequence_beyond_the_last_is_refused(at_sequence: int) -> None:
    with pytest.raises(BrokenHistory, match=f"there is no event {at_sequence}"):
        fold_events(HISTORY, at_sequence=at_sequence)


@pytest.mark.parametrize("at_sequence", [0, -1])
def test_a_sequence_before_the_first_is_refused(at_sequence: int) -> None:
    with pytest.raises(BrokenHistory, match=f"there is no event {at_sequence}"):
        fold_events(HISTORY, at_sequence=at_sequence)


def test_broken_history_maps_to_a_problem_type() -> None:
    assert issubclass(BrokenHistory, EffectBrokerError)
    assert BrokenHistory.problem_type == "broken-history"
