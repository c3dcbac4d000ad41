"""The admin API's JSON shapes: query parameters in, effect views out.

Views are built from domain values only (no I/O), and carry nothing a person could not
already see in the ledger: request previews hold shape, never values; stored bodies
appear only in the receipt view, decrypted for the effect's own tenant. Timestamps are
ISO 8601 with offset, digests hex.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from multidict import MultiMapping

from effect_broker.engine.messages import StoredResponse
from effect_broker.errors import InvalidParameter
from effect_broker.history import HistoryState
from effect_broker.models import (
    Attempt,
    Effect,
    EffectEvent,
    EffectStatus,
    Receipt,
    SafetyClass,
)
from effect_broker.store import EffectFilter

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
LIST_PARAMETERS = frozenset(
    {"status", "route", "operation_key_prefix", "older_than", "limit", "cursor"}
)

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
        "The target commits its change and effect-broker's receipt in one transaction "
        "of the same PostgreSQL, so exactly one committed effect."
    ),
}


@dataclass(frozen=True, slots=True)
class ListQuery:
    where: EffectFilter
    cursor: tuple[datetime, UUID] | None
    limit: int


def _one(query: MultiMapping[str], name: str) -> str | None:
    values = query.getall(name, [])
    if len(values) > 1:
        raise InvalidParameter(name, "may be given only once")
    return values[0] if values else None


def _number(query: MultiMapping[str], name: str) -> float | None:
    text = _one(query, name)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise InvalidParameter(name, f"must be a number, not {text!r}") from None
    if not value >= 0 or value == float("inf"):  # also refuses NaN
        raise InvalidParameter(name, "must be a finite number of seconds, 0 or more")
    return value


def _limit(query: MultiMapping[str]) -> int:
    text = _one(query, "limit")
    if text is None:
        return DEFAULT_LIMIT
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise InvalidParameter("limit", f"must be an integer from 1 to {MAX_LIMIT}")
    return int(text)


def _statuses(query: MultiMapping[str]) -> tuple[EffectStatus, ...] | None:
    values = query.getall("status", [])
    try:
        return tuple(EffectStatus(value) for value in values) or None
    except ValueError:
        known = ", ".join(status.value for status in EffectStatus)
        raise InvalidParameter("status", f"must be one of {known}") from None


def parse_list_query(query: MultiMapping[str], now: datetime) -> ListQuery:
    """The filter, cursor and page size of ``GET /v1/effects``.

    Unknown parameters are refused rather than ignored: a misspelt filter that silently
    listed everything could lead an operator to resolve the wrong effect.
    """
    unknown = sorted(set(query) - LIST_PARAMETERS)
    if unknown:
        raise InvalidParameter(
            unknown[0], f"is not known; use {', '.join(sorted(LIST_PARAMETERS))}"
        )
    older_than = _number(query, "older_than")
    prefix = _one(query, "operation_key_prefix")
    cursor = _one(query, "cursor")
    return ListQuery(
        where=EffectFilter(
            statuses=_statuses(query),
            route=_one(query, "route") or None,
            operation_key_prefix=prefix or None,
            created_before=(
                now - timedelta(seconds=older_than) if older_than is not None else None
            ),
        ),
        cursor=decode_cursor(cursor) if cursor else None,
        limit=_limit(query),
    )


def encode_cursor(position: tuple[datetime, UUID]) -> str:
    """Opaque to clients: where the next page starts (newest first)."""
    created_at, effect_id = position
    raw = f"{created_at.isoformat()}|{effect_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, _, effect_id = raw.partition("|")
        created_at = datetime.fromisoformat(stamp)
        if created_at.tzinfo is None:
            raise ValueError("naive timestamp")
        return created_at, UUID(effect_id)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidParameter(
            "cursor", "is not a cursor this API returned (use next_cursor as is)"
        ) from None


def parse_at_sequence(text: str | None) -> int | None:
    if text is None:
        return None
    if not text.isdigit() or int(text) < 1:
        raise InvalidParameter(
            "at_sequence", "must be an event sequence number, 1 or more"
        )
    return int(text)


def _when(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def effect_view(effect: Effect) -> dict[str, Any]:
    """One effect as the list and every operator action return it."""
    return {
        "id": str(effect.effect_id),
        "tenant": effect.tenant_id,
        "operation_key": effect.operation_key,
        "route": effect.route,
        "contract": f"{effect.contract_name}@{effect.contract_version}",
        "safety": effect.safety.value,
        "status": effect.status.value,
        "version": effect.version,
        "attempts": effect.attempts,
        # What the target saw as its idempotency or correlation key: what to search for
        # in the target's own records before resolving by hand.
        "downstream_key": effect.downstream_key,
        "created_at": _when(effect.created_at),
        "updated_at": _when(effect.updated_at),
        "first_dispatched_at": _when(effect.first_dispatched_at),
        "due_at": _when(effect.due_at),
        "retention_deadline": _when(effect.retention_deadline),
        "settlement_deadline": _when(effect.settlement_deadline),
        "lease_owner": effect.lease_owner,
        "lease_expires_at": _when(effect.lease_expires_at),
        "last_error": effect.last_error,
        "request_preview": dict(effect.request_preview),
    }


def event_view(event: EffectEvent) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "kind": event.kind,
        "from": event.from_status.value if event.from_status else None,
        "to": event.to_status.value,
        "actor": event.actor,
        "details": dict(event.details),
        "occurred_at": _when(event.occurred_at),
        "prev_digest": event.prev_digest.hex(),
        "digest": event.digest.hex(),
    }


def attempt_view(attempt: Attempt) -> dict[str, Any]:
    return {
        "attempt_no": attempt.attempt_no,
        "owner": attempt.owner,
        "started_at": _when(attempt.started_at),
    }


def history_state_view(state: HistoryState) -> dict[str, Any]:
    return {
        "seq": state.seq,
        "status": state.status.value,
        "attempts": state.attempts,
        "last_kind": state.last_kind,
        "last_actor": state.last_actor,
        "occurred_at": _when(state.occurred_at),
    }


def effect_detail_view(
    effect: Effect,
    events: Sequence[EffectEvent],
    attempts: Sequence[Attempt],
    *,
    chain_intact: bool,
    at_sequence: HistoryState | None,
) -> dict[str, Any]:
    """The inspect view: the effect, its full history and what its contract can prove."""
    view = effect_view(effect)
    view["guarantee"] = GUARANTEES[effect.safety]
    view["chain_intact"] = chain_intact
    view["history"] = [event_view(event) for event in events]
    view["attempt_log"] = [attempt_view(attempt) for attempt in attempts]
    if at_sequence is not None:
        view["at_sequence"] = history_state_view(at_sequence)
    return view


def receipt_view(receipt: Receipt, response: StoredResponse) -> dict[str, Any]:
    try:
        text: str | None = response.body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {
        "effect_id": str(receipt.effect_id),
        "status_code": receipt.status_code,
        "source": receipt.source.value,
        "external_id": receipt.external_id,
        "recorded_at": _when(receipt.recorded_at),
        "response": {
            "status": response.status,
            "reason": response.reason,
            "headers": [[name, value] for name, value in response.headers],
            "body_base64": base64.b64encode(response.body).decode("ascii"),
            "body_text": text,
        },
    }
