"""Effect views: domain values turned into the response models of ``admin.schemas``.

Views are built from domain values only (no I/O), and carry nothing a person could not
already see in the ledger: request previews hold shape, never values; stored bodies
appear only in the receipt view, decrypted for the effect's own tenant. Timestamps are
ISO 8601 with offset, digests hex.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from uuid import UUID

from effect_broker.admin import schemas
from effect_broker.admin.redaction import ShownRequest
from effect_broker.admin.requests import ListQuery
from effect_broker.engine.messages import StoredResponse
from effect_broker.history import HistoryState
from effect_broker.models import (
    Attempt,
    Effect,
    EffectEvent,
    EffectFilter,
    Receipt,
    SafetyClass,
)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# What each safety class lets the proxy prove: shown beside every inspected effect so
# nobody reads more into a status than the target's contract supports.
GUARANTEES: Mapping[SafetyClass, str] = {
    SafetyClass.IDEMPOTENT: (
        "The target deduplicates on the stable key effect-broker derives from the "
        "Operation-Key, so every attempt carries the same key: one observable effect "
        "while the target honours that key for its declared retention."
    ),
    SafetyClass.RECONCILABLE: (
        "The target records a correlation key and answers a lookup by it: "
        "effect-broker looks the effect up before sending anything again, so it "
        "converges to one effect if that lookup is truthful and settles within its "
        "bound."
    ),
    SafetyClass.UNSAFE: (
        "The target cannot prove whether this effect happened; effect-broker never "
        "retries it. It sends at most once, so the proxy makes no duplicate, but an "
        "omission is possible: a lost answer waits in outcome_unknown for an operator."
    ),
    SafetyClass.TRANSACTIONAL: (
        "The target runs effect-broker's target kit: each attempt's change and its "
        "receipt commit in one transaction of the target's own PostgreSQL, under a key "
        "of that attempt. After a lost answer effect-broker looks the attempt up, and "
        "if it is absent tombstones its key, so it can never commit; only then is the "
        "next attempt sent: exactly one committed effect, with a proof of absence, "
        "while the target runs the kit truthfully."
    ),
}


def list_filter(query: ListQuery, now: datetime) -> EffectFilter:
    """The store's filter for a validated ``GET /v1/effects`` query.

    An empty ``route`` or prefix means no filter; ``older_than`` is bounded by the
    model, so the subtraction cannot overflow.
    """
    return EffectFilter(
        statuses=tuple(query.status) if query.status else None,
        route=query.route or None,
        operation_key_prefix=query.operation_key_prefix or None,
        created_before=(
            now - timedelta(seconds=query.older_than)
            if query.older_than is not None
            else None
        ),
    )


def encode_cursor(position: tuple[datetime, UUID]) -> str:
    """Opaque to clients: where the next page starts (newest first).

    Microseconds since the epoch, exact in integers (PostgreSQL keeps microseconds),
    then the effect id: a shape ``CURSOR_PATTERN`` can state, so every cursor the
    schema allows is one ``decode_cursor`` reads.
    """
    created_at, effect_id = position
    micros = (created_at - EPOCH) // timedelta(microseconds=1)
    return f"{micros}.{effect_id.hex}"


def decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    """The position ``encode_cursor`` wrote; the model has checked the pattern."""
    micros, _, effect_id = cursor.partition(".")
    return EPOCH + timedelta(microseconds=int(micros)), UUID(hex=effect_id)


def effect_view(effect: Effect) -> schemas.Effect:
    """One effect as the list and every operator action return it."""
    return schemas.Effect(
        id=effect.effect_id,
        tenant=effect.tenant_id,
        operation_key=effect.operation_key,
        route=effect.route,
        contract=f"{effect.contract_name}@{effect.contract_version}",
        safety=effect.safety,
        status=effect.status,
        version=effect.version,
        attempts=effect.attempts,
        downstream_key=effect.downstream_key,
        created_at=effect.created_at,
        updated_at=effect.updated_at,
        first_dispatched_at=effect.first_dispatched_at,
        due_at=effect.due_at,
        retention_deadline=effect.retention_deadline,
        settlement_deadline=effect.settlement_deadline,
        lease_owner=effect.lease_owner,
        lease_expires_at=effect.lease_expires_at,
        last_error=effect.last_error,
        request_preview=dict(effect.request_preview),
        trace_id=trace_id_of(effect),
    )


def trace_id_of(effect: Effect) -> str | None:
    """The trace the request that made the effect belongs to, from its ``traceparent``
    (``version-traceid-spanid-flags``): what to search the tracing backend for."""
    trace = effect.request_preview.get("trace")
    traceparent = trace.get("traceparent") if isinstance(trace, dict) else None
    if not isinstance(traceparent, str):
        return None
    parts = traceparent.split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None


def page_view(
    effects: Sequence[Effect], next_cursor: tuple[datetime, UUID] | None
) -> schemas.EffectPage:
    return schemas.EffectPage(
        effects=[effect_view(effect) for effect in effects],
        next_cursor=encode_cursor(next_cursor) if next_cursor else None,
    )


def event_view(event: EffectEvent) -> schemas.Event:
    return schemas.Event(
        seq=event.seq,
        kind=event.kind,
        from_status=event.from_status,
        to=event.to_status,
        actor=event.actor,
        details=dict(event.details),
        occurred_at=event.occurred_at,
        prev_digest=event.prev_digest.hex(),
        digest=event.digest.hex(),
    )


def attempt_view(attempt: Attempt) -> schemas.Attempt:
    return schemas.Attempt(
        attempt_no=attempt.attempt_no, owner=attempt.owner, started_at=attempt.started_at
    )


def history_state_view(state: HistoryState) -> schemas.HistoryState:
    return schemas.HistoryState(
        seq=state.seq,
        status=state.status,
        attempts=state.attempts,
        last_kind=state.last_kind,
        last_actor=state.last_actor,
        occurred_at=state.occurred_at,
    )


def shown_request_view(shown: ShownRequest) -> schemas.ShownRequest:
    return schemas.ShownRequest(
        method=shown.method,
        url=shown.url,
        headers=list(shown.headers),
        body=shown.body,
        redacted=list(shown.redacted),
    )


def effect_detail_view(
    effect: Effect,
    events: Sequence[EffectEvent],
    attempts: Sequence[Attempt],
    *,
    chain_intact: bool,
    at_sequence: HistoryState | None,
    request: ShownRequest | None = None,
) -> schemas.EffectDetail:
    """The inspect view: the effect, its full history, what its contract can prove, and
    the request (credentials hidden) so an operator knows what to look for."""
    return schemas.EffectDetail(
        **dict(effect_view(effect)),
        guarantee=GUARANTEES[effect.safety],
        chain_intact=chain_intact,
        history=[event_view(event) for event in events],
        attempt_log=[attempt_view(attempt) for attempt in attempts],
        request=shown_request_view(request) if request else None,
        at_sequence=history_state_view(at_sequence) if at_sequence else None,
    )


def receipt_view(receipt: Receipt, response: StoredResponse) -> schemas.Receipt:
    try:
        text: str | None = response.body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return schemas.Receipt(
        effect_id=receipt.effect_id,
        status_code=receipt.status_code,
        source=receipt.source,
        external_id=receipt.external_id,
        recorded_at=receipt.recorded_at,
        response=schemas.StoredAnswer(
            status=response.status,
            reason=response.reason,
            headers=[(name, value) for name, value in response.headers],
            body_base64=base64.b64encode(response.body).decode("ascii"),
            body_text=text,
        ),
    )
