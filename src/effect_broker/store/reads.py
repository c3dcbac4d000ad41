"""What the ledger answers without changing anything: the admin API's and metrics' view.

Every read of effects is scoped by tenant; only the metrics summary looks across
tenants, and it carries no tenant in its labels.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from uuid import UUID

import asyncpg

from effect_broker.errors import EffectNotFound
from effect_broker.models import (
    Attempt,
    AwaitedState,
    EarlierEffect,
    Effect,
    EffectEvent,
    EffectFilter,
    EffectPage,
    EffectStatus,
    Receipt,
)
from effect_broker.store.rows import attempt_of, effect_of, event_of, receipt_of
from effect_broker.store.sql import queries
from effect_broker.store.translate import translated


class LedgerReads:
    """The read half of ``Store``; it shares the store's pool and queries."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._sql = queries()

    async def unknown_summary(self) -> list[tuple[str, EffectStatus, int, datetime]]:
        """(route, status, count, oldest change) of effects awaiting proof or a person.

        Across tenants on purpose: it feeds metrics, which never carry a tenant label.
        """
        async with translated():
            rows = await self._pool.fetch(self._sql["unknown_summary"])
        return [
            (row["route"], EffectStatus(row["status"]), row["effects"], row["oldest"])
            for row in rows
        ]

    async def recent_duplicate(
        self,
        tenant_id: str,
        route: str,
        request_hash: str,
        operation_key: str,
        window: timedelta,
    ) -> EarlierEffect | None:
        """The newest effect on ``route`` within ``window`` whose request equals this
        one's, when ``operation_key`` is new to the ledger (a retry of a known key is
        never a suspect)."""
        async with translated():
            row = await self._pool.fetchrow(
                self._sql["recent_duplicate"],
                tenant_id,
                route,
                request_hash,
                operation_key,
                window,
            )
        if row is None:
            return None
        return EarlierEffect(row["effect_id"], row["operation_key"], row["created_at"])

    async def operation_key_usage(self, window: timedelta) -> list[tuple[str, int, int]]:
        """(route, effects, distinct requests) of effects created within ``window``,
        across tenants: for doctor's key-scope check, which names routes only."""
        async with translated():
            rows = await self._pool.fetch(self._sql["operation_key_usage"], window)
        return [(row["route"], row["effects"], row["requests"]) for row in rows]

    async def tables_without_autovacuum(self) -> list[str]:
        """The ledger tables autovacuum never analyzes: for doctor, because a ledger
        whose statistics never refresh falls to sequential scans as it grows."""
        async with translated():
            rows = await self._pool.fetch(self._sql["ledger_tables_without_autovacuum"])
        return [row["table_name"] for row in rows]

    async def get(self, tenant_id: str, effect_id: UUID) -> Effect:
        async with translated():
            row = await self._pool.fetchrow(self._sql["get_effect"], tenant_id, effect_id)
        if row is None:
            raise EffectNotFound()
        return effect_of(row)

    async def effect_versions(
        self, keys: list[tuple[str, UUID]]
    ) -> tuple[datetime, dict[UUID, AwaitedState]]:
        """The current version of each (tenant, effect) given, whether its lease has
        run out, and the database's time of the read: what waiting duplicates poll
        for."""
        tenants = [tenant for tenant, _ in keys]
        ids = [effect_id for _, effect_id in keys]
        async with translated():
            rows = await self._pool.fetch(self._sql["effect_versions"], tenants, ids)
            if not rows:
                now: datetime = await self._pool.fetchval(self._sql["clock"])
                return now, {}
        return rows[0]["observed_at"], {
            row["effect_id"]: AwaitedState(row["version"], row["lease_expired"])
            for row in rows
        }

    async def get_by_key(self, tenant_id: str, operation_key: str) -> Effect | None:
        async with translated():
            row = await self._pool.fetchrow(
                self._sql["get_effect_by_key"], tenant_id, operation_key
            )
        return effect_of(row) if row is not None else None

    async def list_effects(
        self,
        tenant_id: str,
        where: EffectFilter | None = None,
        *,
        cursor: tuple[datetime, UUID] | None = None,
        limit: int = 50,
    ) -> EffectPage:
        where = where or EffectFilter()
        statuses = [status.value for status in where.statuses] if where.statuses else None
        async with translated():
            rows = await self._pool.fetch(
                self._sql["list_effects"],
                tenant_id,
                statuses,
                where.route,
                where.operation_key_prefix,
                where.created_before,
                cursor[0] if cursor else None,
                cursor[1] if cursor else None,
                limit + 1,
            )
        effects = tuple(effect_of(row) for row in rows[:limit])
        more = len(rows) > limit
        next_cursor = (effects[-1].created_at, effects[-1].effect_id) if more else None
        return EffectPage(effects=effects, next_cursor=next_cursor)

    async def receipt(self, tenant_id: str, effect_id: UUID) -> Receipt | None:
        async with translated("get_receipt"):
            row = await self._pool.fetchrow(
                self._sql["get_receipt"], tenant_id, effect_id
            )
        return receipt_of(row) if row is not None else None

    async def events(self, tenant_id: str, effect_id: UUID) -> list[EffectEvent]:
        async with translated():
            rows = await self._pool.fetch(self._sql["list_events"], tenant_id, effect_id)
        return [event_of(row) for row in rows]

    async def attempts(self, tenant_id: str, effect_id: UUID) -> list[Attempt]:
        async with translated():
            rows = await self._pool.fetch(
                self._sql["list_attempts"], tenant_id, effect_id
            )
        return [attempt_of(row) for row in rows]

    async def verify_events(self, tenant_id: str, effect_id: UUID) -> int | None:
        """The first event sequence whose digest chain breaks, or None if intact.

        Read from the tenant's rows only: one shard when the ledger is distributed.
        """
        async with translated():
            bad: int | None = await self._pool.fetchval(
                self._sql["verify_events"], tenant_id, effect_id
            )
        return bad
