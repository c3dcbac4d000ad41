"""What the engine and the operator surfaces need of a ledger, stated as ports.

``Ledger`` is every write the engine makes (each a compare-and-swap on the effect's
version, raising ``StaleVersion`` when another worker moved it first) and the few reads
it makes on the way; ``LedgerReader`` is what the admin API and the console read. The
PostgreSQL store (``effect_broker.store.Store``) implements both; the composition root
(``runtime``) hands it over, and nothing above the engine imports the store itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

from effect_broker.models import (
    Attempt,
    AttemptTerms,
    AwaitedState,
    EarlierEffect,
    Effect,
    EffectEvent,
    EffectFilter,
    EffectPage,
    EffectStatus,
    Receipt,
    ReceiptSource,
    Reservation,
    SafetyClass,
)


class Ledger(Protocol):
    """The engine's ledger: reservations, attempts, transitions and receipts."""

    async def reserve(
        self,
        *,
        tenant_id: str,
        operation_key: str,
        request_hash: str,
        route: str,
        contract_name: str,
        contract_version: str,
        safety: SafetyClass,
        downstream_key: str,
        request_ciphertext: bytes | None,
        request_preview: Mapping[str, Any],
        owner: str,
        lease: timedelta,
        effect_id: UUID | None = None,
        start: AttemptTerms | None = None,
    ) -> Reservation: ...

    async def start_attempt(
        self,
        effect: Effect,
        *,
        owner: str,
        lease: timedelta,
        key_retention: timedelta | None = None,
        settlement_bound: timedelta | None = None,
    ) -> Effect: ...

    async def renew_lease(
        self, effect: Effect, *, owner: str, lease: timedelta
    ) -> Effect: ...

    async def transition(
        self,
        effect: Effect,
        to: EffectStatus,
        *,
        kind: str,
        actor: str,
        details: Mapping[str, Any] | None = None,
        lease_owner: str | None = None,
        lease: timedelta | None = None,
        due_in: timedelta | None = None,
        error: str | None = None,
        settle_within: timedelta | None = None,
    ) -> Effect: ...

    async def reschedule(
        self,
        effect: Effect,
        *,
        delay: timedelta | None,
        actor: str,
        error: str | None = None,
    ) -> Effect: ...

    async def record_receipt(
        self,
        effect: Effect,
        *,
        status: EffectStatus,
        status_code: int,
        response_ciphertext: bytes,
        source: ReceiptSource,
        actor: str,
        external_id: str | None = None,
        kind: str = "settled",
        details: Mapping[str, Any] | None = None,
    ) -> tuple[Effect, Receipt]: ...

    async def claim_due(
        self, *, owner: str, lease: timedelta, limit: int
    ) -> list[Effect]: ...

    async def prune_settled(
        self, retention: Mapping[str, timedelta], *, limit: int
    ) -> list[str]: ...

    async def get(self, tenant_id: str, effect_id: UUID) -> Effect: ...

    async def receipt(self, tenant_id: str, effect_id: UUID) -> Receipt | None: ...

    async def effect_versions(
        self, keys: list[tuple[str, UUID]]
    ) -> tuple[datetime, dict[UUID, AwaitedState]]: ...


class LedgerReader(Protocol):
    """What operators and the request path read: lists, one effect whole, readiness,
    the summary the metrics and alerts use, and the duplicate guard's look-back. Every
    read but the summary is scoped to one tenant."""

    async def ping(self) -> None: ...

    async def pending_migrations(self) -> list[Any]: ...

    async def unknown_summary(self) -> list[tuple[str, EffectStatus, int, datetime]]: ...

    async def get(self, tenant_id: str, effect_id: UUID) -> Effect: ...

    async def list_effects(
        self,
        tenant_id: str,
        where: EffectFilter | None = None,
        *,
        cursor: tuple[datetime, UUID] | None = None,
        limit: int = 50,
    ) -> EffectPage: ...

    async def receipt(self, tenant_id: str, effect_id: UUID) -> Receipt | None: ...

    async def events(self, tenant_id: str, effect_id: UUID) -> list[EffectEvent]: ...

    async def attempts(self, tenant_id: str, effect_id: UUID) -> list[Attempt]: ...

    async def verify_events(self, tenant_id: str, effect_id: UUID) -> int | None: ...

    async def recent_duplicate(
        self,
        tenant_id: str,
        route: str,
        request_hash: str,
        operation_key: str,
        window: timedelta,
    ) -> EarlierEffect | None: ...
