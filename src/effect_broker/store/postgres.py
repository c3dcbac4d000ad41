"""The ledger on PostgreSQL: every read and compare-and-swap write effect-broker makes.

This package is the only place that imports asyncpg; callers get frozen domain values
from ``effect_broker.models`` and errors from ``effect_broker.errors``. Each operation is
one round trip: the multi-row writes run as one statement (a CTE or a SQL function), so
the hot path costs the database as little as it can.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import asyncpg

from effect_broker.errors import (
    EffectNotFound,
    MasterKeyError,
    ReceiptExists,
    StaleVersion,
    StoreError,
    StoreUnavailable,
)
from effect_broker.models import (
    Attempt,
    Effect,
    EffectEvent,
    EffectStatus,
    Receipt,
    ReceiptSource,
    Reservation,
    ReservationOutcome,
    SafetyClass,
)
from effect_broker.state_machine import check_transition
from effect_broker.store.migrations import Migration, apply_migrations, pending_migrations
from effect_broker.store.sql import queries

_SETTLED = frozenset({EffectStatus.SUCCEEDED, EffectStatus.FAILED_FINAL})


@dataclass(frozen=True, slots=True)
class EffectFilter:
    """What an operator may narrow a listing by; every field is optional."""

    statuses: Sequence[EffectStatus] | None = None
    route: str | None = None
    operation_key_prefix: str | None = None
    created_before: datetime | None = None


@dataclass(frozen=True, slots=True)
class AttemptTerms:
    """The deadlines a first dispatch stamps on an effect (see ``Store.reserve``)."""

    key_retention: timedelta | None = None
    settlement_bound: timedelta | None = None


@dataclass(frozen=True, slots=True)
class EffectPage:
    effects: tuple[Effect, ...]
    next_cursor: tuple[datetime, UUID] | None


@asynccontextmanager
async def _translated() -> AsyncIterator[None]:
    """Turn driver errors into ours, so nothing above the store knows about asyncpg."""
    try:
        yield
    except (
        OSError,
        asyncpg.PostgresConnectionError,
        asyncpg.InterfaceError,
        # A connection left mid-protocol by a server restart ("cannot switch to state
        # 12; another operation is in progress"): the database, not the request, failed.
        asyncpg.InternalClientError,
    ) as exc:
        raise StoreUnavailable(f"the ledger database is unreachable: {exc}") from exc
    except asyncpg.UniqueViolationError as exc:
        if exc.table_name == "effect_receipts":
            raise ReceiptExists() from exc
        raise StoreError(
            f"unique constraint {exc.constraint_name} refused a write"
        ) from exc
    except asyncpg.OperatorInterventionError as exc:  # class 57: shutdown, restart
        raise StoreUnavailable(
            f"the ledger database is starting or shutting down: {exc}"
        ) from exc
    except asyncpg.PostgresError as exc:
        raise StoreError(f"the ledger refused the operation: {exc}") from exc


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Release without asyncpg's reset query (advisory unlock, CLOSE ALL, UNLISTEN,
    RESET ALL): the store never changes session state, and skipping it saves one round
    trip per ledger call. asyncpg still rolls back a transaction left open."""


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec(
        "jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
    )


def _effect(row: asyncpg.Record) -> Effect:
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
        request_preview=_json_object(row["request_preview"]),
        last_error=row["last_error"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _json_object(value: Any) -> Mapping[str, Any]:
    # Inside a composite (the reserve function's row) jsonb arrives as text.
    decoded = json.loads(value) if isinstance(value, str) else value
    return decoded if isinstance(decoded, dict) else {}


def _receipt(row: asyncpg.Record) -> Receipt:
    return Receipt(
        effect_id=row["effect_id"],
        status_code=row["status_code"],
        response_ciphertext=row["response_ciphertext"],
        source=ReceiptSource(row["source"]),
        external_id=row["external_id"],
        recorded_at=row["recorded_at"],
    )


def _event(row: asyncpg.Record) -> EffectEvent:
    return EffectEvent(
        effect_id=row["effect_id"],
        seq=row["seq"],
        kind=row["kind"],
        from_status=EffectStatus(row["from_status"]) if row["from_status"] else None,
        to_status=EffectStatus(row["to_status"]),
        actor=row["actor"],
        details=_json_object(row["details"]),
        occurred_at=row["occurred_at"],
        prev_digest=bytes(row["prev_digest"]),
        digest=bytes(row["digest"]),
    )


class Store:
    """The ledger. Every state change is a compare-and-swap on ``Effect.version``.

    A write whose expected version is stale changes nothing and raises ``StaleVersion``:
    that is how a paused or partitioned worker is fenced out after its lease was taken.
    """

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._sql = queries()
        # Called once per fenced (stale) write, for the metric that makes zombies visible.
        self.on_fenced: Callable[[], None] = lambda: None

    @classmethod
    async def connect(cls, dsn: str, *, min_size: int = 1, max_size: int = 10) -> Store:
        async with _translated():
            pool = await asyncpg.create_pool(
                dsn,
                min_size=min_size,
                max_size=max_size,
                init=_init_connection,
                reset=_keep_session,
            )
        return cls(pool)

    async def close(self) -> None:
        await self._pool.close()

    # -- schema ---------------------------------------------------------------------

    async def migrate(self) -> list[Migration]:
        async with _translated(), self._pool.acquire() as conn:
            return await apply_migrations(conn)

    async def pending_migrations(self) -> list[Migration]:
        async with _translated(), self._pool.acquire() as conn:
            return await pending_migrations(conn)

    async def ping(self) -> None:
        async with _translated():
            await self._pool.fetchval(self._sql["ping"])

    async def clock(self) -> datetime:
        """The database's current time: leases are stamped with it."""
        async with _translated():
            now: datetime = await self._pool.fetchval(self._sql["clock"])
        return now

    async def check_master_key(self, key_id: str, *, record: bool = True) -> None:
        """Refuse a master key other than the one that encrypted what is stored here.

        A fresh ledger records the first key it sees (``record``), so every later start
        with another key is refused.
        """
        async with _translated():
            known = [
                row["key_id"]
                for row in await self._pool.fetch(self._sql["list_master_keys"])
            ]
            if known and key_id not in known:
                raise MasterKeyError(
                    "this database holds payloads encrypted under master key "
                    f"{known[0]}, "
                    f"but the configured master key is {key_id}; set "
                    "EFFECT_BROKER_MASTER_KEY to the key this ledger was created with"
                )
            if not known and record:
                await self._pool.execute(self._sql["record_master_key"], key_id)

    # -- tenants ------------------------------------------------------------------------

    async def add_api_key(self, tenant_id: str, key_id: str, secret_hash: bytes) -> None:
        """Create the tenant if needed and store the hash of one new API key."""
        async with _translated(), self._pool.acquire() as conn, conn.transaction():
            await conn.execute(self._sql["add_tenant"], tenant_id)
            await conn.execute(self._sql["add_api_key"], key_id, tenant_id, secret_hash)

    async def api_key(self, key_id: str) -> tuple[str, bytes] | None:
        """(tenant, secret hash) of a live API key, or None."""
        async with _translated():
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
        async with _translated():
            row = await self._pool.fetchrow(
                self._sql["reserve"],
                effect_id or uuid4(),
                tenant_id,
                operation_key,
                request_hash,
                route,
                contract_name,
                contract_version,
                safety.value,
                downstream_key,
                request_ciphertext,
                dict(request_preview),
                owner,
                lease,
                start is not None,
                start.key_retention if start else None,
                start.settlement_bound if start else None,
            )
        assert row is not None, "reserve_effect always returns one row"
        effect = _effect(row)
        stored_receipt = row["receipt"]
        receipt = (
            _receipt(stored_receipt)
            if stored_receipt is not None and stored_receipt["effect_id"] is not None
            else None
        )
        if row["created"]:
            outcome = ReservationOutcome.CREATED
        elif effect.request_hash == request_hash:
            outcome = ReservationOutcome.REPLAY
        else:
            outcome = ReservationOutcome.CONFLICT
        return Reservation(outcome=outcome, effect=effect, receipt=receipt)

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
        return await self._write_one(
            "start_attempt",
            effect,
            effect.effect_id,
            effect.version,
            owner,
            lease,
            key_retention,
            settlement_bound,
            effect.status.value,
        )

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
        if to in _SETTLED:
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
        if status not in _SETTLED:
            raise ValueError(f"a receipt settles an effect; {status} is not settled")
        check_transition(effect.status, status, effect.safety)
        async with _translated():
            row = await self._pool.fetchrow(
                self._sql["record_receipt"],
                effect.effect_id,
                effect.version,
                effect.status.value,
                status.value,
                kind,
                actor,
                status_code,
                response_ciphertext,
                source.value,
                external_id,
                dict(details or {}),
            )
        if row is None:
            raise self._stale(effect)
        settled = _effect(row)
        receipt = Receipt(
            effect_id=settled.effect_id,
            status_code=status_code,
            response_ciphertext=response_ciphertext,
            source=source,
            external_id=external_id,
            recorded_at=settled.updated_at,
        )
        return settled, receipt

    # -- the reconciler -----------------------------------------------------------------

    async def claim_due(
        self, *, owner: str, lease: timedelta, limit: int
    ) -> list[Effect]:
        """Lease effects whose wake-up time passed; rows another worker holds are skipped.

        Claiming bumps the version, so whoever held an expired lease is fenced from now
        on.
        """
        async with _translated():
            rows = await self._pool.fetch(self._sql["claim_due"], limit, owner, lease)
        return [_effect(row) for row in rows]

    async def unknown_summary(self) -> list[tuple[str, EffectStatus, int, datetime]]:
        """(route, status, count, oldest change) of effects awaiting proof or a person.

        Across tenants on purpose: it feeds metrics, which never carry a tenant label.
        """
        async with _translated():
            rows = await self._pool.fetch(self._sql["unknown_summary"])
        return [
            (row["route"], EffectStatus(row["status"]), row["effects"], row["oldest"])
            for row in rows
        ]

    # -- reads (always scoped by tenant) ------------------------------------------------

    async def get(self, tenant_id: str, effect_id: UUID) -> Effect:
        async with _translated():
            row = await self._pool.fetchrow(self._sql["get_effect"], tenant_id, effect_id)
        if row is None:
            raise EffectNotFound()
        return _effect(row)

    async def get_by_key(self, tenant_id: str, operation_key: str) -> Effect | None:
        async with _translated():
            row = await self._pool.fetchrow(
                self._sql["get_effect_by_key"], tenant_id, operation_key
            )
        return _effect(row) if row is not None else None

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
        async with _translated():
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
        effects = tuple(_effect(row) for row in rows[:limit])
        more = len(rows) > limit
        next_cursor = (effects[-1].created_at, effects[-1].effect_id) if more else None
        return EffectPage(effects=effects, next_cursor=next_cursor)

    async def receipt(self, tenant_id: str, effect_id: UUID) -> Receipt | None:
        async with _translated():
            row = await self._pool.fetchrow(
                self._sql["get_receipt"], tenant_id, effect_id
            )
        return _receipt(row) if row is not None else None

    async def events(self, tenant_id: str, effect_id: UUID) -> list[EffectEvent]:
        async with _translated():
            rows = await self._pool.fetch(self._sql["list_events"], tenant_id, effect_id)
        return [_event(row) for row in rows]

    async def attempts(self, tenant_id: str, effect_id: UUID) -> list[Attempt]:
        async with _translated():
            rows = await self._pool.fetch(
                self._sql["list_attempts"], tenant_id, effect_id
            )
        return [
            Attempt(row["effect_id"], row["attempt_no"], row["owner"], row["started_at"])
            for row in rows
        ]

    async def verify_events(self, effect_id: UUID) -> int | None:
        """The first event sequence whose digest chain breaks, or None if intact."""
        async with _translated():
            bad: int | None = await self._pool.fetchval(
                self._sql["verify_events"], effect_id
            )
        return bad

    # -- helpers ------------------------------------------------------------------------

    async def _write_one(self, query: str, effect: Effect, *args: Any) -> Effect:
        async with _translated():
            row = await self._pool.fetchrow(self._sql[query], *args)
        if row is None:
            raise self._stale(effect)
        return _effect(row)

    def _stale(self, effect: Effect) -> StaleVersion:
        self.on_fenced()
        return StaleVersion(
            f"effect {effect.effect_id} is no longer at version {effect.version} "
            f"({effect.status}); the write was fenced and changed nothing"
        )
