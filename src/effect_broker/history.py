"""Fold an effect's event history into its state at any sequence (pure, no I/O).

Operators ask "what did the ledger believe at step N, and who moved it?" The events are
the authority for that question; the effects row is only the latest fold of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from effect_broker.errors import BrokenHistory
from effect_broker.models import EffectEvent, EffectStatus


@dataclass(frozen=True, slots=True)
class HistoryState:
    seq: int
    status: EffectStatus
    attempts: int
    last_kind: str
    last_actor: str
    occurred_at: datetime


def fold_events(
    events: Sequence[EffectEvent], at_sequence: int | None = None
) -> HistoryState:
    """The effect as it stood after event ``at_sequence`` (default: the latest)."""
    if not events:
        raise BrokenHistory("an effect always has at least its reservation event")
    state: HistoryState | None = None
    for expected_seq, event in enumerate(events, start=1):
        if at_sequence is not None and event.seq > at_sequence:
            break
        if event.seq != expected_seq:
            raise BrokenHistory(f"event {expected_seq} is missing (found {event.seq})")
        previous = state.status if state else None
        if event.from_status != previous:
            raise BrokenHistory(
                f"event {event.seq} moves from {event.from_status}, "
                f"but the effect was {previous}"
            )
        state = HistoryState(
            seq=event.seq,
            status=event.to_status,
            attempts=(state.attempts if state else 0) + (event.kind == "dispatch"),
            last_kind=event.kind,
            last_actor=event.actor,
            occurred_at=event.occurred_at,
        )
    if state is None or (at_sequence is not None and state.seq != at_sequence):
        raise BrokenHistory(f"there is no event {at_sequence}")
    return state
