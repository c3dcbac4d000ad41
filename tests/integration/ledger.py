"""Small builders for ledger tests: a reservation with sensible defaults."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from effect_broker.models import Reservation, SafetyClass
from effect_broker.store import Store

LEASE = timedelta(seconds=30)


async def reserve(store: Store, **overrides: Any) -> Reservation:
    fields: dict[str, Any] = {
        "tenant_id": "acme",
        "operation_key": "order-42:charge",
        "request_hash": "hash-1",
        "route": "charge",
        "contract_name": "payments.charge",
        "contract_version": "1",
        "safety": SafetyClass.IDEMPOTENT,
        "downstream_key": "dk-1",
        "request_ciphertext": b"sealed-request",
        "request_preview": {"amount": 1000},
        "owner": "proxy-a",
        "lease": LEASE,
    }
    fields.update(overrides)
    return await store.reserve(**fields)
