"""The ledger on PostgreSQL: every read and compare-and-swap write effect-broker makes.

This package is the only place that imports asyncpg; callers get frozen domain values
from ``effect_broker.models`` and errors from ``effect_broker.errors``. Each operation is
one round trip: the multi-row writes run as one statement (a CTE or a SQL function), so
the hot path costs the database as little as it can.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import asyncpg

from effect_broker.errors import StaleVersion
from effect_broker.models import (
    AttemptTerms,
    Effect,
    EffectStatus,
    Receipt,
    ReceiptSource,
    Reservation,
    SafetyClass,
)
from effect_broker.state_machine import TERMINAL, check_transition
from effect_broker.store.claims import Claims
from effect_broker.store.coalesced import CoalescedWrites
from effect_broker.store.distribute import distribute, require_engine
from effect_broker.store.dsn import ledger_endpoints
from effect_broker.store.keys import LedgerKeys
from effect_broker.store.migrations import Migration, apply_migrations, pending_migrations
from effect_broker.store.pool_log import quiet_pool_reconnects
from effect_broker.store.reads import LedgerReads
from effect_broker.store.rows import effect_of
from effect_broker.store.running_calls import RunningCalls
from effect_broker.store.translate import connect_failure, translated
from effect_broker.store.write_requests import (
    ReceiptRequest,
    ReserveRequest,
    StartRequest,
)

#: Settings every ledger connection starts with (sent with the connection, no round
#: trip). ``enable_seqscan = off``: every runtime statement is written for an index
#: (``tests/integration/test_index_use.py``), and the planner must never pick a whole
#: table read because the table looked small when the plan was made. A pool keeps each
#: statement's generic plan, and plpgsql each function's, from the first calls on; made
#: on a fresh ledger, those plans read ``effects`` whole, and with no ANALYZE to replace
#: them (autovacuum off) every batch kept reading it whole as it grew: throughput fell
#: by a third, and PostgreSQL's CPU per effect rose fourfold, within 30 s at c=64.
#: The few operator walks that must read everything switch it back on for themselves
#: (``store/keys.py``), as does applying migrations.
SESSION_SETTINGS: Mapping[str, str] = {"enable_seqscan": "off"}


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Release without asyncpg's reset query (advisory unlock, CLOSE ALL, UNLISTEN,
    RESET ALL): the store never changes session state, and skipping it saves one round
    trip per ledger call. asyncpg still rolls back a transaction left open."""


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec(
        "jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
    )


class Store(CoalescedWrites, LedgerReads, LedgerKeys, RunningCalls, Claims):
    """The ledger. Every state change is a compare-and-swap on ``Effect.version``.

    A write whose expected version is stale changes nothing and raises ``StaleVersion``:
    that is how a paused or partitioned worker is fenced out after its lease was taken.
    """

    def __init__(self, pool: asyncpg.Pool) -> None:
        super().__init__(pool)
        # Called once per fenced (stale) write, for the metric that makes zombies visible.
        self.on_fenced: Callable[[], None] = lambda: None
        self._start_batchers()

    @classmethod
    async def connect(cls, dsn: str, *, min_size: int = 1, max_size: int = 10) -> Store:
        quiet_pool_reconnects()
        try:
            pool = await asyncpg.create_pool(
                dsn,
                min_size=min_size,
                max_size=max_size,
                init=_init_connection,
                reset=_keep_session,
                server_settings=dict(SESSION_SETTINGS),
            )
        except Exception as exc:
            endpoints = ledger_endpoints(dsn)
            where = ", ".join(f"{host}:{port}" for host, port in endpoints) or (
                "the local socket"
            )
            failure = connect_failure(where, exc)
            if failure is None:
                raise
            raise failure from exc
        return cls(pool)

    async def close(self) -> None:
        await self._release_writers()
        await self._pool.close()

    # -- schema ---------------------------------------------------------------------

    async def migrate(self) -> list[Migration]:
        async with translated(), self._pool.acquire() as conn:
            return await apply_migrations(conn)

    async def require_engine(self, engine: str) -> None:
        """Raise ``MigrationError`` unless this database runs ``engine``."""
        async with translated(), self._pool.acquire() as conn:
            await require_engine(conn, engine)

    async def distribute(self, engine: str, *, shard_count: int | None = None) -> str:
        """Place the migrated ledger on a cluster (``store/distribute.py``); return the
        engine's version. From now on this store claims work tenant by tenant."""
        async with translated(), self._pool.acquire() as conn:
            version = await distribute(conn, engine, shard_count=shard_count)
        self._per_tenant = True
        return version

    async def pending_migrations(self) -> list[Migration]:
        async with translated(), self._pool.acquire() as conn:
            return await pending_migrations(conn)

    async def ping(self) -> None:
        async with translated():
            await self._pool.fetchval(self._sql["ping"])

    async def clock(self) -> datetime:
        """The database's current time: leases are stamped with it."""
        async with translated():
            now: datetime = await self._pool.fetchval(self._sql["clock"])
        return now

    # -- tenants ------------------------------------------------------------------------

    async def add_api_key(self, tenant_id: str, key_id: str, secret_hash: bytes) -> None:
        """Create the tenant if needed and store the hash of one new API key."""
        async with translated(), self._pool.acquire() as conn, conn.transaction():
            await conn.execute(self._sql["add_tenant"], tenant_id)
            await conn.execute(self._sql["add_api_key"], key_id, tenant_id, secret_hash)

    async def api_key(self, key_id: str) -> tuple[str, bytes] | None:
        """(tenant, secret hash) of a live API key, or None."""
        async with translated():
            row = await self._pool.fetchrow(self._sql["get_api_key"], key_id)
        return (row["tenant_id"], bytes(row["secret_hash"])) if row else None

    # -- the request path -------------------------------------------------------------

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
    ) -> Reservation:
        """Record the intent once per (tenant, operation key), bound to its request hash.

        ``effect_id`` lets the caller encrypt the request for this effect before the row
        exists; it is ignored when the key was already reserved. With ``start`` a new
        effect is committed already DISPATCHING, its first attempt recorded and leased
        to ``owner``, in the same transaction as the reservation.
        """
        request = ReserveRequest(
            effect_id=effect_id or uuid4(),
            tenant_id=tenant_id,
            operation_key=operation_key,
            request_hash=request_hash,
            route=route,
            contract_name=contract_name,
            contract_version=contract_version,
            safety=safety,
            downstream_key=downstream_key,
            request_ciphertext=request_ciphertext,
            request_preview=request_preview,
            owner=owner,
            lease=lease,
            start=start,
        )
        async with translated("reserve"):
            return await self._reservations.submit(request)

    async def start_attempt(
        self,
        effect: Effect,
        *,
        owner: str,
        lease: timedelta,
        key_retention: timedelta | None = None,
        settlement_bound: timedelta | None = None,
    ) -> Effect:
        """Commit DISPATCHING, the attempt row and the lease before any byte leaves."""
        check_transition(effect.status, EffectStatus.DISPATCHING, effect.safety)
        request = StartRequest(effect, owner, lease, key_retention, settlement_bound)
        async with translated("start_attempt"):
            return await self._starts.submit(request)

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
    ) -> Effect:
        """Move ``effect`` to ``to`` if nobody wrote it since it was read.

        ``lease`` keeps the effect claimed by ``lease_owner`` (RECONCILING); ``due_in``
        sets when the reconciler looks again (RETRYABLE, OUTCOME_UNKNOWN, a requeue).
        With neither, nothing is due: the effect is settled or waits for an operator.
        ``settle_within`` restarts the settlement clock: a lookup is conclusive only
        that long after the moment the outcome was lost.
        """
        if to in TERMINAL:
            raise ValueError("settling an effect stores a receipt: use record_receipt")
        if to is EffectStatus.DISPATCHING:
            raise ValueError("dispatching records an attempt: use start_attempt")
        check_transition(effect.status, to, effect.safety)
        return await self._write_one(
            "transition",
            effect,
            effect.effect_id,
            effect.version,
            effect.status.value,
            to.value,
            kind,
            actor,
            lease_owner if lease is not None else None,
            lease,
            due_in,
            error,
            dict(details or {}),
            settle_within,
            effect.tenant_id,
        )

    async def reschedule(
        self,
        effect: Effect,
        *,
        delay: timedelta | None,
        actor: str,
        error: str | None = None,
    ) -> Effect:
        """Keep the status, release the lease and look again after ``delay``.

        ``delay=None`` leaves nothing due: the effect waits for a person (unsafe).
        """
        return await self._write_one(
            "reschedule",
            effect,
            effect.effect_id,
            effect.version,
            effect.status.value,
            delay,
            actor,
            error,
            effect.tenant_id,
        )

    async def renew_lease(
        self, effect: Effect, *, owner: str, lease: timedelta
    ) -> Effect:
        """Extend a DISPATCHING effect's lease to ``lease`` from now, for its holder.

        Fenced by version like every write, and the version moves on: a worker that
        read the effect while the old lease looked expired cannot take it over after
        this commit. ``StaleVersion`` when someone else moved it first.
        """
        return await self._write_one(
            "renew_lease",
            effect,
            effect.effect_id,
            effect.version,
            owner,
            lease,
            effect.tenant_id,
        )

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
    ) -> tuple[Effect, Receipt]:
        """Settle the effect and store its immutable receipt in the same transaction."""
        if status not in TERMINAL:
            raise ValueError(f"a receipt settles an effect; {status} is not settled")
        check_transition(effect.status, status, effect.safety)
        request = ReceiptRequest(
            effect=effect,
            status=status,
            status_code=status_code,
            response_ciphertext=response_ciphertext,
            source=source,
            actor=actor,
            external_id=external_id,
            kind=kind,
            details=details or {},
        )
        async with translated("record_receipt"):
            return await self._receipts.submit(request)

    # -- helpers ------------------------------------------------------------------------

    async def _write_one(self, query: str, effect: Effect, *args: Any) -> Effect:
        async with translated(query):
            row = await self._pool.fetchrow(await self._write_sql(query), *args)
        if row is None:
            raise self._stale(effect)
        return effect_of(row)

    def _stale(self, effect: Effect) -> StaleVersion:
        self.on_fenced()
        return StaleVersion(
            f"effect {effect.effect_id} is no longer at version {effect.version} "
            f"({effect.status}); the write was fenced and changed nothing"
        )
