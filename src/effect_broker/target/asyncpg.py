"""The kit on asyncpg: the in-transaction API, install and check, and a ``Backend``.

Inside the service's transaction, in this order::

    found = await prior(conn, key)        # StoredAnswer: replay it; Tombstoned: 409
    ...the service's mutation...
    await record(conn, key, answer)       # the LAST statement; AttemptTaken if lost

The receipt is inserted last on purpose. While the service's transaction runs, the
attempt key is free, so a tombstone from the proxy commits at once and the attempt's
``record`` then fails on the primary key, rolling back the mutation with it: the
tombstone wins. Once the receipt row is inserted, a tombstone waits for the outcome
(refused with the receipt if it commits, committed if it rolls back). Exactly one of
the two ever commits. ``run_attempt`` does all of it for the common case.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from effect_broker.target import schema, statements
from effect_broker.target.backend import TOMBSTONE_WAIT, PerCallBackend
from effect_broker.target.outcomes import (
    AttemptInProgress,
    AttemptTaken,
    Tombstoned,
    TombstoneResult,
    answer_for,
    prior_from_report,
    report_from_row,
    tombstoned_answer,
)
from effect_broker.target.protocol import AttemptReport, AttemptState, StoredAnswer

Connection = asyncpg.Connection | PoolConnectionProxy
#: Where the endpoints get a connection: ``pool.acquire``, or a callable returning it.
Acquire = Callable[[], AbstractAsyncContextManager[Connection]]
Mutation = Callable[[Connection], Awaitable[StoredAnswer]]


def _require_transaction(conn: Connection, what: str) -> None:
    if not conn.is_in_transaction():
        raise RuntimeError(
            f"{what} must run inside the service's transaction: outside it, the receipt"
            " would not commit or roll back together with the mutation"
        )


async def _find(conn: Connection, key: str) -> AttemptReport:
    try:
        row = await conn.fetchrow(statements.FIND, key)
    except asyncpg.UndefinedTableError as exc:
        raise schema.missing() from exc
    return report_from_row(key, None if row is None else (*row.values(),))


async def prior(conn: Connection, key: str) -> StoredAnswer | Tombstoned | None:
    """What this attempt key already has: a committed answer to replay, a tombstone
    (answer ``tombstoned_answer``, do nothing), or None (go ahead)."""
    _require_transaction(conn, "prior()")
    return prior_from_report(await _find(conn, key))


async def record(conn: Connection, key: str, answer: StoredAnswer) -> None:
    """Store ``answer`` as the attempt's receipt: the last statement before commit.

    Raises ``AttemptTaken`` when a tombstone (or a duplicate of this attempt) committed
    the key first; PostgreSQL has then aborted the transaction, so the mutation cannot
    commit. A plain INSERT rather than ON CONFLICT DO NOTHING for exactly that reason.
    """
    _require_transaction(conn, "record()")
    try:
        await conn.execute(
            statements.RECORD,
            key,
            answer.status,
            statements.json_text(answer.headers),
            answer.body,
        )
    except asyncpg.UniqueViolationError as exc:
        raise AttemptTaken(key) from exc


async def lookup(conn: Connection, key: str) -> AttemptReport:
    """The attempt's committed state: what the lookup endpoint answers."""
    return await _find(conn, key)


async def tombstone(
    conn: Connection, key: str, *, wait: float = TOMBSTONE_WAIT
) -> TombstoneResult:
    """Commit a tombstone for ``key`` unless the attempt committed first.

    Runs its own short transaction (``conn`` must not be in one). If the attempt's
    receipt row is inserted but not committed, the INSERT waits for it, at most
    ``wait`` seconds (``lock_timeout``), then raises ``AttemptInProgress``.
    """
    if conn.is_in_transaction():
        raise RuntimeError(
            "tombstone() commits on its own: call it outside a transaction"
        )
    try:
        async with conn.transaction():
            await conn.execute(statements.LOCK_TIMEOUT, statements.milliseconds(wait))
            at = await conn.fetchval(statements.TOMBSTONE, key)
            if at is not None:
                return TombstoneResult(
                    AttemptReport(key, AttemptState.TOMBSTONED, at), created=True
                )
            report = await _find(conn, key)
    except asyncpg.LockNotAvailableError as exc:
        raise AttemptInProgress(key) from exc
    except asyncpg.UndefinedTableError as exc:
        raise schema.missing() from exc
    return TombstoneResult(report, created=False)


async def run_attempt(conn: Connection, key: str, mutate: Mutation) -> StoredAnswer:
    """Run ``mutate`` and the receipt in one transaction; the answer to send.

    A replay gets the stored answer without running ``mutate``; an attempt the proxy
    tombstoned gets ``tombstoned_answer``, before or after running it (then rolled back).
    ``conn`` must not be in a transaction: this one is the attempt's.
    """
    try:
        async with conn.transaction():
            found = await prior(conn, key)
            if isinstance(found, StoredAnswer):
                return found
            if isinstance(found, Tombstoned):
                return tombstoned_answer(key)
            answer = await mutate(conn)
            await record(conn, key, answer)
            return answer
    except AttemptTaken:
        return answer_for(await lookup(conn, key))


async def check_installed(conn: Connection) -> None:
    """Raise ``KitNotInstalled``, saying how to fix it, unless the table is ready."""
    rows = await conn.fetch(schema.COLUMNS_SQL)
    schema.judge_columns((row[0], row[1]) for row in rows)


async def install(conn: Connection) -> None:
    """Apply the kit's migrations (each safe to re-run), one transaction each."""
    for _name, sql in schema.migrations():
        for first_try in (True, False):
            try:
                async with conn.transaction():
                    await conn.execute(sql)
                break
            except asyncpg.PostgresError as exc:
                if not (first_try and exc.sqlstate in statements.INSTALL_RACES):
                    raise


class AsyncpgBackend(PerCallBackend[Connection]):
    """The endpoints' access to the table: a connection per call, held only for it."""

    def __init__(
        self, acquire: Acquire, *, tombstone_wait: float = TOMBSTONE_WAIT
    ) -> None:
        super().__init__(
            acquire,
            lookup=lookup,
            tombstone=tombstone,
            check_installed=check_installed,
            tombstone_wait=tombstone_wait,
        )
