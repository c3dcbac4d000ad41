"""What to do with a reserved effect: the proxy's one decision, as a pure function.

Given the ledger row the reservation returned, the route's contract and the time, it
says whether to forward, replay, join, refuse or probe. Nothing here touches a socket or
the database, so every branch is table-tested; the flow module carries the verdict out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from effect_broker.config.contracts import Contract
from effect_broker.models import Effect, EffectStatus, Reservation, ReservationOutcome
from effect_broker.models import SafetyClass as Safety

DEFAULT_RETRY_AFTER = timedelta(seconds=1)


class Verdict(StrEnum):
    DISPATCH = "dispatch"  # nothing left yet, or sending again is provably safe
    REPLAY = "replay"  # settled: give back the stored receipt
    CONFLICT = "conflict"  # the key was bound to another payload: 422
    IN_FLIGHT = "in_flight"  # someone holds a live lease on it: 409 + Retry-After
    EXPIRE_LEASE = (
        "expire_lease"  # its holder died mid-flight: mark unknown, decide again
    )
    PROBE = "probe"  # reconcilable and unknown: ask the target before anything else
    WAIT_SETTLEMENT = (
        "wait_settlement"  # unknown, but a negative probe proves nothing yet
    )
    UNKNOWN = "unknown"  # the target cannot prove what happened: never forward


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    reason: str
    retry_after: timedelta | None = None


def _lease_live(effect: Effect, now: datetime) -> bool:
    return effect.lease_expires_at is not None and effect.lease_expires_at > now


def _until(deadline: datetime | None, now: datetime) -> timedelta:
    if deadline is None or deadline <= now:
        return DEFAULT_RETRY_AFTER
    return deadline - now


def decide(reservation: Reservation, contract: Contract, now: datetime) -> Decision:
    """The verdict for one request whose key was just reserved (or found reserved)."""
    effect = reservation.effect
    if reservation.outcome is ReservationOutcome.CONFLICT:
        return Decision(Verdict.CONFLICT, "the operation key is bound to another payload")
    if reservation.outcome is ReservationOutcome.CREATED:
        return Decision(Verdict.DISPATCH, "new effect")

    status = effect.status
    if status in (EffectStatus.SUCCEEDED, EffectStatus.FAILED_FINAL):
        return Decision(Verdict.REPLAY, f"settled as {status}")
    if status in (
        EffectStatus.PREPARED,
        EffectStatus.DISPATCHING,
        EffectStatus.RECONCILING,
    ):
        if _lease_live(effect, now):
            return Decision(
                Verdict.IN_FLIGHT,
                f"{status} by another request",
                _until(effect.lease_expires_at, now),
            )
        if status is EffectStatus.PREPARED:
            return Decision(Verdict.DISPATCH, "reserved but never sent")
        return Decision(Verdict.EXPIRE_LEASE, f"{status} lease expired: its holder died")
    if status is EffectStatus.RETRYABLE:
        return Decision(Verdict.DISPATCH, "the last attempt provably sent nothing")
    if status is EffectStatus.MANUAL_REVIEW:
        return Decision(Verdict.UNKNOWN, "awaiting an operator's resolution")
    return _decide_unknown(effect, contract, now)


def _decide_unknown(effect: Effect, contract: Contract, now: datetime) -> Decision:
    if effect.safety is Safety.IDEMPOTENT:
        if effect.retention_deadline is not None and now < effect.retention_deadline:
            return Decision(Verdict.DISPATCH, "idempotent: same key within its retention")
        return Decision(
            Verdict.UNKNOWN, "the target's key retention has expired: an operator decides"
        )
    if effect.safety is Safety.RECONCILABLE and contract.probe is not None:
        if effect.settlement_deadline is not None and now < effect.settlement_deadline:
            return Decision(
                Verdict.WAIT_SETTLEMENT,
                "the target's lookup is not conclusive before its settlement bound",
                _until(effect.settlement_deadline, now),
            )
        return Decision(Verdict.PROBE, "reconcilable: look the effect up first")
    return Decision(
        Verdict.UNKNOWN, f"an {effect.safety} target cannot prove what happened"
    )
