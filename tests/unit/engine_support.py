"""The contracts and effects the pure engine tests judge: one of each safety class.

Shared by the policy's and the rulings' tables, which ask the same questions of the
same effects at different moments.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import datetime, timedelta

from effect_broker.config.contracts import Contract, Probe
from effect_broker.models import Effect
from effect_broker.models import EffectStatus as S
from effect_broker.models import SafetyClass as C

PROBE = Probe("GET", "/t?c={downstream_key}", frozenset({200}), frozenset({404}))
CONTRACTS = {
    C.IDEMPOTENT: Contract(
        "pay", "1", C.IDEMPOTENT, idempotency_header="Idempotency-Key",
        key_retention=timedelta(hours=24), retry_limit=3,
    ),
    C.RECONCILABLE: Contract(
        "ticket", "1", C.RECONCILABLE, correlation_header="X-Correlation-Id",
        settlement_bound=timedelta(seconds=2), probe=PROBE, retry_limit=3,
    ),
    C.UNSAFE: Contract("email", "1", C.UNSAFE, retry_limit=3),
    C.TRANSACTIONAL: Contract("ledger", "1", C.TRANSACTIONAL, retry_limit=3),
}  # fmt: skip


def effect_at(
    at: datetime,
    kept_until: datetime,
    safety: C,
    status: S,
    /,
    **changes: object,
) -> Effect:
    """An effect of ``safety`` in ``status``, dispatched, created and last touched
    ``at``; ``changes`` replace any field."""
    base = Effect(
        effect_id=uuid.uuid4(),
        tenant_id="t",
        operation_key="k",
        request_hash="h",
        route="r",
        contract_name=CONTRACTS[safety].name,
        contract_version="1",
        safety=safety,
        downstream_key="dk",
        status=status,
        version=1,
        attempts=1,
        lease_owner=None,
        lease_expires_at=None,
        due_at=None,
        first_dispatched_at=at,
        retention_deadline=kept_until,
        settlement_deadline=at,
        request_ciphertext=None,
        request_preview={},
        last_error=None,
        created_at=at,
        updated_at=at,
    )
    return replace(base, **changes)  # type: ignore[arg-type]
