"""The request path's three writes, coalesced: reserve, start an attempt, settle.

Each runs through a ``Batcher``: concurrent calls share one statement (``unnest`` over
parallel arrays) and one commit, and each caller gets back exactly what the one-row
statement would have told it. A key already taken is a row of the answer; a fenced
effect (its version moved on) is a row missing from the answer, so that caller alone gets
``StaleVersion``. Should the statement itself fail, an unreachable database fails every
request of the batch (as it would each of them alone), and any other error is retried
row by row with the one-row statements, so each request gets its own error and its
neighbours their own results.

No caller hears anything before the batch's statement returned, that is, committed:
nothing goes upstream, and no answer goes back, before the write is durable.

On one PostgreSQL a batch is one statement whatever its tenants. On a ledger sharded by
tenant (``store/sharding.py``) a statement spanning tenants would span shards, which
Citus commits with two-phase commit; there each batch is split by tenant and each
tenant's share is one ``<statement>_of_tenant`` statement: a call of a function
distributed by tenant (migration 0014), so it runs and commits on the tenant's shard
alone, without two-phase commit (a share of one request takes the one-row write).
The shares of a batch touch disjoint rows, so they are written at once, each on a pool
connection of its own.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

import asyncpg

from effect_broker import failpoints
from effect_broker.errors import StaleVersion, StoreError, StoreUnavailable
from effect_broker.models import (
    Effect,
    EffectStatus,
    Receipt,
    Reservation,
    ReservationOutcome,
)
from effect_broker.store.batch import Batcher
from effect_broker.store.held import HeldConnection
from effect_broker.store.rows import effect_of, receipt_of
from effect_broker.store.sharding import Sharding
from effect_broker.store.translate import translated
from effect_broker.store.write_requests import (
    ReceiptRequest,
    ReserveRequest,
    StartRequest,
)

T = TypeVar("T")
R = TypeVar("R")

#: Where a statement runs: a writer's kept connection, or any pool connection.
Runner = HeldConnection | asyncpg.Pool

#: The largest batch one statement carries; more waiting requests take the next one.
MAX_BATCH = 128


class CoalescedWrites(Sharding):
    """The batched half of ``Store``'s writes; it shares the store's pool and queries."""

    _pool: asyncpg.Pool
    _sql: Mapping[str, str]

    def _stale(self, effect: Effect) -> StaleVersion:
        raise NotImplementedError

    def _start_batchers(self) -> None:
        # One kept connection per writer: each writes one statement at a time.
        self._reserving = HeldConnection(self._pool)
        self._starting = HeldConnection(self._pool)
        self._settling = HeldConnection(self._pool)
        self._reservations: Batcher[ReserveRequest, Reservation] = Batcher(
            self._write_reservations,
            key=lambda r: (r.tenant_id, r.operation_key),
            max_size=MAX_BATCH,
        )
        self._starts: Batcher[StartRequest, Effect] = Batcher(
            self._write_starts, key=lambda r: r.effect.effect_id, max_size=MAX_BATCH
        )
        self._receipts: Batcher[ReceiptRequest, tuple[Effect, Receipt]] = Batcher(
            self._write_receipts, key=lambda r: r.effect.effect_id, max_size=MAX_BATCH
        )

    async def _release_writers(self) -> None:
        """Give the writers' kept connections back, so the pool can close."""
        for held in (self._reserving, self._starting, self._settling):
            await held.release()

    # -- reserve ------------------------------------------------------------------------

    async def _write_reservations(
        self, batch: Sequence[ReserveRequest]
    ) -> Sequence[Reservation | BaseException]:
        if len(batch) == 1:
            return await _alone(batch[0], self._reserve_one, failpoints.IN_RESERVE_BATCH)
        return await self._per_ledger(
            batch,
            lambda r: r.tenant_id,
            self._reserve_batch,
            self._reserve_one,
            failpoints.IN_RESERVE_BATCH,
        )

    async def _reserve_batch(
        self, batch: Sequence[ReserveRequest], tenant: str | None = None
    ) -> Sequence[Reservation | BaseException]:
        """One statement for the batch: across tenants, or (``tenant``) within one.

        Within one tenant the statement is one call that reserves each key through
        ``reserve_effect``, so every request has its row; should one be missing, that
        request gets the one-row statement."""
        rows = await self._fetch_batch(
            self._reserving,
            "reserve_batch",
            batch,
            _columns(_reserve_arguments(r) for r in batch),
            self._reserve_one,
            failpoints.IN_RESERVE_BATCH,
            tenant=tenant,
        )
        if not isinstance(rows, list):
            return rows.results
        by_ord = {row["ord"]: row for row in rows}
        results: list[Reservation | BaseException] = []
        for i, r in enumerate(batch, start=1):
            if i in by_ord:
                results.append(_reservation(by_ord[i], r.request_hash))
            elif tenant is not None:
                results.append(
                    await _outcome(lambda r: self._reserve_one(r, self._pool), r)
                )
            else:
                results.append(
                    StoreError("the reservation vanished while it was written")
                )
        return results

    async def _reserve_one(
        self, r: ReserveRequest, via: Runner | None = None
    ) -> Reservation:
        async with translated():
            row = await (self._reserving if via is None else via).fetchrow(
                self._sql["reserve"], *_reserve_arguments(r, preview_as_text=False)
            )
        assert row is not None, "reserve_effect always returns one row"
        return _reservation(row, r.request_hash)

    # -- start an attempt ---------------------------------------------------------------

    async def _write_starts(
        self, batch: Sequence[StartRequest]
    ) -> Sequence[Effect | BaseException]:
        if len(batch) == 1:
            return await _alone(batch[0], self._start_one)
        return await self._per_ledger(
            batch, lambda r: r.effect.tenant_id, self._start_batch, self._start_one
        )

    async def _start_batch(
        self, batch: Sequence[StartRequest], tenant: str | None = None
    ) -> Sequence[Effect | BaseException]:
        """One statement for the batch: across tenants, or (``tenant``) within one."""
        rows = await self._fetch_batch(
            self._starting,
            "start_attempt_batch",
            batch,
            _columns(_start_arguments(r) for r in batch),
            self._start_one,
            tenant=tenant,
        )
        if not isinstance(rows, list):
            return rows.results
        by_ord = {row["batch_ord"]: row for row in rows}
        return [
            self._started(r, by_ord[i]) if i in by_ord else self._stale(r.effect)
            for i, r in enumerate(batch, start=1)
        ]

    @staticmethod
    def _started(r: StartRequest, row: asyncpg.Record) -> Effect:
        return replace(
            r.effect,
            status=EffectStatus.DISPATCHING,
            version=row["version"],
            attempts=row["attempts"],
            lease_owner=r.owner,
            lease_expires_at=row["lease_expires_at"],
            due_at=row["due_at"],
            first_dispatched_at=row["first_dispatched_at"],
            retention_deadline=row["retention_deadline"],
            settlement_deadline=row["settlement_deadline"],
            last_error=None,
            updated_at=row["updated_at"],
        )

    async def _start_one(self, r: StartRequest, via: Runner | None = None) -> Effect:
        sql = await self._write_sql("start_attempt")
        async with translated():
            row = await (self._starting if via is None else via).fetchrow(
                sql, *_start_arguments(r)
            )
        if row is None:
            raise self._stale(r.effect)
        return effect_of(row)

    # -- settle with a receipt ----------------------------------------------------------

    async def _write_receipts(
        self, batch: Sequence[ReceiptRequest]
    ) -> Sequence[tuple[Effect, Receipt] | BaseException]:
        if len(batch) == 1:
            return await _alone(batch[0], self._receipt_one, failpoints.IN_RECEIPT_BATCH)
        return await self._per_ledger(
            batch,
            lambda r: r.effect.tenant_id,
            self._receipt_batch,
            self._receipt_one,
            failpoints.IN_RECEIPT_BATCH,
        )

    async def _receipt_batch(
        self, batch: Sequence[ReceiptRequest], tenant: str | None = None
    ) -> Sequence[tuple[Effect, Receipt] | BaseException]:
        """One statement for the batch: across tenants, or (``tenant``) within one."""
        rows = await self._fetch_batch(
            self._settling,
            "record_receipt_batch",
            batch,
            _columns(_receipt_arguments(r) for r in batch),
            self._receipt_one,
            failpoints.IN_RECEIPT_BATCH,
            tenant=tenant,
        )
        if not isinstance(rows, list):
            return rows.results
        by_ord = {row["batch_ord"]: row for row in rows}
        return [
            _settled(r, by_ord[i]["version"], by_ord[i]["updated_at"])
            if i in by_ord
            else self._stale(r.effect)
            for i, r in enumerate(batch, start=1)
        ]

    async def _receipt_one(
        self, r: ReceiptRequest, via: Runner | None = None
    ) -> tuple[Effect, Receipt]:
        sql = await self._write_sql("record_receipt")
        async with translated():
            row = await (self._settling if via is None else via).fetchrow(
                sql, *_receipt_arguments(r, details_as_text=False)
            )
        if row is None:
            raise self._stale(r.effect)
        return _settled(r, row["version"], row["updated_at"])

    # -- the batch statement ------------------------------------------------------------

    async def _per_ledger(
        self,
        batch: Sequence[T],
        tenant_of: Callable[[T], str],
        write: Callable[
            [Sequence[T], str | None], Awaitable[Sequence[R | BaseException]]
        ],
        one: Callable[[T, Runner], Awaitable[R]],
        failpoint: str | None = None,
    ) -> Sequence[R | BaseException]:
        """``write`` the batch as one statement on one PostgreSQL; on a sharded ledger,
        tenant by tenant (``_by_tenant``), a share of one through ``one`` on the pool."""
        if not await self._sharded():
            return await write(batch, None)
        return await _by_tenant(
            batch, tenant_of, write, lambda r: one(r, self._pool), failpoint
        )

    async def _fetch_batch(
        self,
        held: HeldConnection,
        query: str,
        batch: Sequence[T],
        columns: list[list[Any]],
        one: Callable[[T, Runner], Awaitable[R]],
        failpoint: str | None = None,
        *,
        tenant: str | None = None,
    ) -> list[asyncpg.Record] | _Failed[R]:
        """Run one batch statement; on an error, each request's own outcome instead.

        Across tenants the statement is ``query`` on the writer's ``held`` connection;
        within one ``tenant`` (a sharded ledger) it is ``<query>_of_tenant``, with the
        tenant after the columns, on any pool connection, as is each request's own
        write (``one``) then.

        ``failpoint`` fires after the statement committed and before any request of
        the batch hears of it: the one moment inside a batch that differs from a crash
        around a single write (a statement is atomic; before its commit nothing of the
        batch exists, after it all of it does).
        """
        via: Runner = held if tenant is None else self._pool
        name, parameters = (
            (query, columns)
            if tenant is None
            else (f"{query}_of_tenant", [*columns, tenant])
        )
        try:
            async with translated():
                rows = await via.fetch(self._sql[name], *parameters)
        except StoreUnavailable as exc:
            # Nothing was written, or the commit's fate is unknown: each request would
            # have had this error alone.
            return _Failed([StoreUnavailable(exc.message) for _ in batch])
        except Exception as exc:
            if len(batch) == 1:
                return _Failed([exc])
            return _Failed(
                [await _outcome(lambda r: one(r, via), item) for item in batch]
            )
        if failpoint is not None:
            failpoints.hit(failpoint)
        return rows


@dataclass(frozen=True, slots=True)
class _Failed(Generic[R]):
    """The batch statement failed: here is each request's own outcome instead."""

    results: list[R | BaseException]


async def _alone(
    item: T, one: Callable[[T], Awaitable[R]], failpoint: str | None = None
) -> list[R | BaseException]:
    """A batch of one (an idle proxy) takes the one-row statement: its plan costs the
    database less than the ``unnest`` form, which only pays off from two rows on."""
    result = await _outcome(one, item)
    if failpoint is not None and not isinstance(result, BaseException):
        failpoints.hit(failpoint)
    return [result]


async def _by_tenant(
    batch: Sequence[T],
    tenant_of: Callable[[T], str],
    write: Callable[[Sequence[T], str], Awaitable[Sequence[R | BaseException]]],
    one: Callable[[T], Awaitable[R]],
    failpoint: str | None = None,
) -> list[R | BaseException]:
    """The batch split by tenant (a sharded ledger): ``write(share, tenant)`` for each
    tenant's share of two or more, ``one`` for a share of one, all shares at once
    (their rows are disjoint); every request gets its own result, in order."""
    shares: dict[str, list[int]] = {}
    for position, item in enumerate(batch):
        shares.setdefault(tenant_of(item), []).append(position)

    async def share(tenant: str, positions: list[int]) -> Sequence[R | BaseException]:
        items = [batch[position] for position in positions]
        if len(items) == 1:
            return await _alone(items[0], one, failpoint)
        return await write(items, tenant)

    written = await asyncio.gather(
        *(share(tenant, positions) for tenant, positions in shares.items())
    )
    results: list[R | BaseException | None] = [None] * len(batch)
    for positions, answers in zip(shares.values(), written, strict=True):
        for position, result in zip(positions, answers, strict=True):
            results[position] = result
    return [
        result if result is not None else StoreError("a request of the batch was lost")
        for result in results
    ]


async def _outcome(one: Callable[[T], Awaitable[R]], item: T) -> R | BaseException:
    try:
        return await one(item)
    except Exception as exc:
        return exc


def _columns(rows: Iterable[Sequence[Any]]) -> list[list[Any]]:
    """One list per parameter from one argument list per request: the batch statements
    take each parameter as an array (``unnest``), in the one-row statement's order."""
    return [list(column) for column in zip(*rows, strict=True)]


def _start_arguments(r: StartRequest) -> tuple[Any, ...]:
    """An attempt start's parameters, in the order both statements take them."""
    return (
        r.effect.effect_id,
        r.effect.version,
        r.owner,
        r.lease,
        r.key_retention,
        r.settlement_bound,
        r.effect.status.value,
        r.effect.tenant_id,
    )


def _reservation(row: asyncpg.Record, request_hash: str) -> Reservation:
    effect = effect_of(row)
    stored = row["receipt"]
    receipt = (
        receipt_of(stored)
        if stored is not None and stored["effect_id"] is not None
        else None
    )
    if row["created"]:
        outcome = ReservationOutcome.CREATED
    elif effect.request_hash == request_hash:
        outcome = ReservationOutcome.REPLAY
    else:
        outcome = ReservationOutcome.CONFLICT
    return Reservation(
        outcome=outcome, effect=effect, receipt=receipt, observed_at=row["observed_at"]
    )


def _reserve_arguments(r: ReserveRequest, *, preview_as_text: bool = True) -> list[Any]:
    """The reservation's parameters, in the order both statements take them: the batch
    form takes the preview as JSON text (an array of jsonb), the one-row one as a dict."""
    start = r.start
    preview = dict(r.request_preview)
    return [
        r.effect_id,
        r.tenant_id,
        r.operation_key,
        r.request_hash,
        r.route,
        r.contract_name,
        r.contract_version,
        r.safety.value,
        r.downstream_key,
        r.request_ciphertext,
        json.dumps(preview) if preview_as_text else preview,
        r.owner,
        r.lease,
        start is not None,
        start.key_retention if start else None,
        start.settlement_bound if start else None,
    ]


def _receipt_arguments(r: ReceiptRequest, *, details_as_text: bool = True) -> list[Any]:
    details = dict(r.details)
    return [
        r.effect.effect_id,
        r.effect.version,
        r.effect.status.value,
        r.status.value,
        r.kind,
        r.actor,
        r.status_code,
        r.response_ciphertext,
        r.source.value,
        r.external_id,
        json.dumps(details) if details_as_text else details,
        r.effect.tenant_id,
    ]


def _settled(r: ReceiptRequest, version: int, at: Any) -> tuple[Effect, Receipt]:
    """The effect as the settling write left it: only these columns changed."""
    settled = replace(
        r.effect,
        status=r.status,
        version=version,
        lease_owner=None,
        lease_expires_at=None,
        due_at=None,
        last_error=None,
        updated_at=at,
    )
    receipt = Receipt(
        effect_id=settled.effect_id,
        status_code=r.status_code,
        response_ciphertext=r.response_ciphertext,
        source=r.source,
        external_id=r.external_id,
        recorded_at=at,
    )
    return settled, receipt
