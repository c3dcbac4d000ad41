"""Domain values shared by the proxy, the reconciler and the store.

Everything here is frozen: a value read from the ledger is a snapshot, and changing the
ledger goes through the store's compare-and-swap writes, never through a mutated object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any
from uuid import UUID


class SafetyClass(StrEnum):
    """What the target can prove, and therefore what the proxy may promise."""

    IDEMPOTENT = "idempotent"
    RECONCILABLE = "reconcilable"
    UNSAFE = "unsafe"
    TRANSACTIONAL = "transactional"


class EffectStatus(StrEnum):
    PREPARED = "prepared"
    DISPATCHING = "dispatching"
    SUCCEEDED = "succeeded"
    FAILED_FINAL = "failed_final"
    RETRYABLE = "retryable"
    OUTCOME_UNKNOWN = "outcome_unknown"
    RECONCILING = "reconciling"
    MANUAL_REVIEW = "manual_review"


@dataclass(frozen=True, slots=True)
class Effect:
    """A snapshot of one ledger row; ``version`` is what a CAS write expects."""

    effect_id: UUID
    tenant_id: str
    operation_key: str
    request_hash: str
    route: str
    contract_name: str
    contract_version: str
    safety: SafetyClass
    downstream_key: str
    status: EffectStatus
    version: int
    attempts: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    due_at: datetime | None
    first_dispatched_at: datetime | None
    retention_deadline: datetime | None
    settlement_deadline: datetime | None
    request_ciphertext: bytes | None
    request_preview: Mapping[str, Any]
    last_error: str | None
    created_at: datetime
    updated_at: datetime


class ReceiptSource(StrEnum):
    RESPONSE = "response"
    PROBE = "probe"
    OPERATOR = "operator"
    PROXY = "proxy"  # given up after the retry limit; no attempt ever took effect
    # A transactional target's kit gave the answer an attempt committed with, by its
    # attempt key: the target's own answer, recovered after the proxy lost it.
    LOOKUP = "lookup"


@dataclass(frozen=True, slots=True)
class Receipt:
    """What the target answered (or what a probe or operator proved). Never changes."""

    effect_id: UUID
    status_code: int
    response_ciphertext: bytes
    source: ReceiptSource
    external_id: str | None
    recorded_at: datetime


@dataclass(frozen=True, slots=True)
class EffectEvent:
    effect_id: UUID
    seq: int
    kind: str
    from_status: EffectStatus | None
    to_status: EffectStatus
    actor: str
    details: Mapping[str, Any]
    occurred_at: datetime
    prev_digest: bytes
    digest: bytes


@dataclass(frozen=True, slots=True)
class Attempt:
    effect_id: UUID
    attempt_no: int
    owner: str
    started_at: datetime


class ReservationOutcome(StrEnum):
    CREATED = "created"
    REPLAY = "replay"
    CONFLICT = "conflict"


@dataclass(frozen=True, slots=True)
class Reservation:
    """The answer to "may I start this effect?": created, the same intent again, or drift.

    On ``replay`` the caller decides by ``effect.status`` whether to return the
    receipt, join an in-flight dispatch (409) or resume. On ``conflict`` the stored row
    is untouched. ``observed_at`` is the database's time of the reservation: what the
    caller's decisions about leases and deadlines are measured against.
    """

    outcome: ReservationOutcome
    effect: Effect
    receipt: Receipt | None
    observed_at: datetime


@dataclass(frozen=True, slots=True)
class AttemptTerms:
    """The deadlines a first dispatch stamps on an effect (see ``Ledger.reserve``)."""

    key_retention: timedelta | None = None
    settlement_bound: timedelta | None = None


@dataclass(frozen=True, slots=True)
class AwaitedState:
    """What a waiting duplicate needs to know of an effect in flight, as one poll read
    it: its version (any write moves it), and whether its lease had run out by the
    database's clock at the read (its holder died: nobody will move it unless asked)."""

    version: int
    lease_expired: bool


@dataclass(frozen=True, slots=True)
class EffectFilter:
    """What an operator may narrow a listing by; every field is optional."""

    statuses: Sequence[EffectStatus] | None = None
    route: str | None = None
    operation_key_prefix: str | None = None
    created_before: datetime | None = None


@dataclass(frozen=True, slots=True)
class EffectPage:
    effects: tuple[Effect, ...]
    next_cursor: tuple[datetime, UUID] | None


@dataclass(frozen=True, slots=True)
class EarlierEffect:
    """A recent effect with the same request as a new operation key: maybe the same
    intent under a key minted fresh."""

    effect_id: UUID
    operation_key: str
    created_at: datetime
