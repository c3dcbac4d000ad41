"""The kit on psycopg 3 (async): the same API as ``effect_broker.target.asyncpg``.

Inside the service's transaction, in this order::

    found = await prior(conn, key)        # StoredAnswer: replay it; Tombstoned: 409
    ...the service's mutation...
    await record(conn, key, answer)       # the LAST statement; AttemptTaken if lost

Why the receipt goes last, and what that buys, is explained in the asyncpg module; the
two modules differ only in how they talk to their driver. Every query uses its own
tuple cursor, so a service's row factory (``dict_row``...) changes nothing here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import psycopg
from psycopg import errors
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

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

Connection = psycopg.AsyncConnection[Any]
#: Where the endpoints get a connection: ``pool.connection`` (psycopg_pool), or
#: ``connecting(url)`` for a connection per call.
Acquire = Callable[[], AbstractAsyncContextManager[Connection]]
Mutation = Callable[[Connection], Awaitable[StoredAnswer]]

_FIND = statements.pyformat(statements.FIND)
_RECORD = statements.pyformat(statements.RECORD)
_LOCK_TIMEOUT = statements.pyformat(statements.LOCK_TIMEOUT)
_TOMBSTONE = statements.pyformat(statements.TOMBSTONE)


def _idle(conn: Connection) -> bool:
    return conn.info.transaction_status == TransactionStatus.IDLE


def _require_transaction(conn: Connection, what: str) -> None:
    """In autocommit mode nothing groups statements unless a transaction was begun;
    otherwise psycopg has begun one (or will, with the next statement)."""
    if conn.autocommit and _idle(conn):
        raise RuntimeError(
            f"{what} must run inside the service's transaction: outside it, the receipt"
            " would not commit or roll back together with the mutation"
        )


def _require_idle(conn: Connection, what: str) -> None:
    if not _idle(conn):
        raise RuntimeError(f"{what} runs its own transaction: call it outside one")


async def _find(conn: Connection, key: str) -> AttemptReport:
    try:
        async with conn.cursor(row_factory=tuple_row) as cursor:
            await cursor.execute(_FIND, (key,))
            row = await cursor.fetchone()
    except errors.UndefinedTable as exc:
        raise schema.missing() from exc
    return report_from_row(key, row)


async def prior(conn: Connection, key: str) -> StoredAnswer | Tombstoned | None:
    """What this attempt key already has: a committed answer to replay, a tombstone
    (answer ``tombstoned_answer``, do nothing), or None (go ahead)."""
    _require_transaction(conn, "prior()")
    return prior_from_report(await _find(conn, key))


async def record(conn: Connection, key: str, answer: StoredAnswer) -> None:
    """Store ``answer`` as the attempt's receipt: the last statement before commit.

    Raises ``AttemptTaken`` when a tombstone (or a duplicate of this attempt) committed
    the key first; PostgreSQL has then aborted the transaction, so the mutation cannot
    commit.
    """
    _require_transaction(conn, "record()")
    values = (key, answer.status, statements.json_text(answer.headers), answer.body)
    try:
        await conn.execute(_RECORD, values)
    except errors.UniqueViolation as exc:
        raise AttemptTaken(key) from exc


async def lookup(conn: Connection, key: str) -> AttemptReport:
    """The attempt's committed state: what the lookup endpoint answers."""
    if not _idle(conn):
        return await _find(conn, key)
    async with conn.transaction():  # leaves the connection idle, as it came
        return await _find(conn, key)


async def tombstone(
    conn: Connection, key: str, *, wait: float = TOMBSTONE_WAIT
) -> TombstoneResult:
    """Commit a tombstone for ``key`` unless the attempt committed first; waits at
    most ``wait`` seconds for an uncommitted receipt row, then ``AttemptInProgress``."""
    _require_idle(conn, "tombstone()")
    try:
        async with conn.transaction(), conn.cursor(row_factory=tuple_row) as cursor:
            await cursor.execute(_LOCK_TIMEOUT, (statements.milliseconds(wait),))
            await cursor.execute(_TOMBSTONE, (key,))
            created = await cursor.fetchone()
            if created is not None:
                report = AttemptReport(key, AttemptState.TOMBSTONED, created[0])
                return TombstoneResult(report, created=True)
            report = await _find(conn, key)
    except errors.LockNotAvailable as exc:
        raise AttemptInProgress(key) from exc
    except errors.UndefinedTable as exc:
        raise schema.missing() from exc
    return TombstoneResult(report, created=False)


async def run_attempt(conn: Connection, key: str, mutate: Mutation) -> StoredAnswer:
    """Run ``mutate`` and the receipt in one transaction; the answer to send.

    A replay gets the stored answer without running ``mutate``; an attempt the proxy
    tombstoned gets ``tombstoned_answer``, before or after running it (then rolled back).
    """
    _require_idle(conn, "run_attempt()")
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


async def _columns(conn: Connection) -> list[tuple[Any, ...]]:
    async with conn.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(schema.COLUMNS_SQL)
        return await cursor.fetchall()


async def check_installed(conn: Connection) -> None:
    """Raise ``KitNotInstalled``, saying how to fix it, unless the table is ready."""
    if _idle(conn):
        async with conn.transaction():  # leaves the connection idle, as it came
            rows = await _columns(conn)
    else:
        rows = await _columns(conn)
    schema.judge_columns((row[0], row[1]) for row in rows)


async def install(conn: Connection) -> None:
    """Apply the kit's migrations (each safe to re-run), one transaction each."""
    _require_idle(conn, "install()")
    for _name, sql in schema.migrations():
        for first_try in (True, False):
            try:
                async with conn.transaction():
                    await conn.execute(sql)
                break
            except psycopg.Error as exc:
                if not (first_try and exc.sqlstate in statements.INSTALL_RACES):
                    raise


def connecting(url: str) -> Acquire:
    """A connection per call, closed after it: for services without a pool."""

    @asynccontextmanager
    async def acquire() -> AsyncIterator[Connection]:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        try:
            yield conn
        finally:
            await conn.close()

    return acquire


class PsycopgBackend(PerCallBackend[Connection]):
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
