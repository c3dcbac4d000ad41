"""One pool connection a coalesced writer keeps between its statements.

``pool.fetch`` acquires a connection and gives it back for every statement, and asyncpg
makes that cost: the release runs in a task of its own (``asyncio.shield``) and re-arms an
inactivity timer. Timed alone, that was about 40 µs of CPU and 45 µs of latency per
statement on top of the statement's own; an idle proxy paid it twice per new effect.
A writer that runs one statement at a time (each ``Batcher`` lane) may as well keep its
connection.

It gives the connection back to the pool after any failure, so the pool decides what a
broken or interrupted connection is worth (it terminates one that is closed, rolls back
a transaction left open), and the next statement takes a fresh one. A pool too small to
spare one connection per writer besides the rest of the store's work is used per
statement as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg

R = TypeVar("R")

#: Keep a connection only when the pool has at least this many: one for each of the
#: three request-path writers, and the rest for reads, the reconciler and the admin API.
KEEP_FROM_POOL_SIZE = 6


class HeldConnection:
    """Run statements on one kept connection, one at a time."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._keep = pool.get_max_size() >= KEEP_FROM_POOL_SIZE
        self._conn: Any = None  # a pool connection proxy while one is kept
        self._lock = asyncio.Lock()

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        return await self._run(lambda conn: conn.fetch(query, *args))

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        return await self._run(lambda conn: conn.fetchrow(query, *args))

    async def release(self) -> None:
        """Give the kept connection back (before the pool closes)."""
        async with self._lock:
            await self._give_back()

    async def _run(self, statement: Callable[[Any], Awaitable[R]]) -> R:
        async with self._lock:
            if self._conn is None:
                self._conn = await self._pool.acquire()
            try:
                result = await statement(self._conn)
            except BaseException:
                await self._give_back()
                raise
            if not self._keep:
                await self._give_back()
            return result

    async def _give_back(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await self._pool.release(conn)
