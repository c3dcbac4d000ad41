"""What the request path asks the ledger to write, one value per request.

``Store.reserve``, ``start_attempt`` and ``record_receipt`` turn their arguments into
these, so a batch of them can be written by one statement (``store.coalesced``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

from effect_broker.models import (
    AttemptTerms,
    Effect,
    EffectStatus,
    ReceiptSource,
    SafetyClass,
)


@dataclass(frozen=True, slots=True)
class ReserveRequest:
    effect_id: UUID
    tenant_id: str
    operation_key: str
    request_hash: str
    route: str
    contract_name: str
    contract_version: str
    safety: SafetyClass
    downstream_key: str
    request_ciphertext: bytes | None
    request_preview: Mapping[str, Any]
    owner: str
    lease: timedelta
    start: AttemptTerms | None


@dataclass(frozen=True, slots=True)
class StartRequest:
    effect: Effect
    owner: str
    lease: timedelta
    key_retention: timedelta | None
    settlement_bound: timedelta | None


@dataclass(frozen=True, slots=True)
class ReceiptRequest:
    effect: Effect
    status: EffectStatus
    status_code: int
    response_ciphertext: bytes
    source: ReceiptSource
    actor: str
    external_id: str | None
    kind: str
    details: Mapping[str, Any]
