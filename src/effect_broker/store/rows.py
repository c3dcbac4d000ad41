"""Rows of the ledger's tables as the frozen values the rest of the code uses."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import asyncpg

from effect_broker.models import (
    Attempt,
    Effect,
    EffectEvent,
    EffectStatus,
    Receipt,
    ReceiptSource,
    SafetyClass,
)


def effect_of(row: asyncpg.Record) -> Effect:
    return Effect(
        effect_id=row["effect_id"],
        tenant_id=row["tenant_id"],
        operation_key=row["operation_key"],
        request_hash=row["request_hash"],
        route=row["route"],
        contract_name=row["contract_name"],
        contract_version=row["contract_version"],
        safety=SafetyClass(row["safety"]),
        downstream_key=row["downstream_key"],
        status=EffectStatus(row["status"]),
        version=row["version"],
        attempts=row["attempts"],
        lease_owner=row["lease_owner"],
        lease_expires_at=row["lease_expires_at"],
        due_at=row["due_at"],
        first_dispatched_at=row["first_dispatched_at"],
        retention_deadline=row["retention_deadline"],
        settlement_deadline=row["settlement_deadline"],
        request_ciphertext=row["request_ciphertext"],
        request_preview=json_object(row["request_preview"]),
        last_error=row["last_error"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def json_object(value: Any) -> Mapping[str, Any]:
    # Inside a composite (the reserve function's row) jsonb arrives as text.
    decoded = json.loads(value) if isinstance(value, str) else value
    return decoded if isinstance(decoded, dict) else {}


def receipt_of(row: asyncpg.Record) -> Receipt:
    return Receipt(
        effect_id=row["effect_id"],
        status_code=row["status_code"],
        response_ciphertext=row["response_ciphertext"],
        source=ReceiptSource(row["source"]),
        external_id=row["external_id"],
        recorded_at=row["recorded_at"],
    )


def event_of(row: asyncpg.Record) -> EffectEvent:
    return EffectEvent(
        effect_id=row["effect_id"],
        seq=row["seq"],
        kind=row["kind"],
        from_status=EffectStatus(row["from_status"]) if row["from_status"] else None,
        to_status=EffectStatus(row["to_status"]),
        actor=row["actor"],
        details=json_object(row["details"]),
        occurred_at=row["occurred_at"],
        prev_digest=bytes(row["prev_digest"]),
        digest=bytes(row["digest"]),
    )


def attempt_of(row: asyncpg.Record) -> Attempt:
    return Attempt(row["effect_id"], row["attempt_no"], row["owner"], row["started_at"])
