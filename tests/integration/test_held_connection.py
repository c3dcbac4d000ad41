"""A writer's kept connection on a real server: one backend across statements, given
back after a failure and at close, and per statement from a pool too small to spare it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from effect_broker.store.held import KEEP_FROM_POOL_SIZE, HeldConnection

BACKEND = "SELECT pg_backend_pid()"


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    async with asyncpg.create_pool(
        database_url, min_size=1, max_size=KEEP_FROM_POOL_SIZE
    ) as pool:
        yield pool


async def backends(held: HeldConnection, statements: int) -> set[int]:
    rows = [await held.fetchrow(BACKEND) for _ in range(statements)]
    return {row[0] for row in rows if row is not None}


async def test_statements_run_on_one_kept_connection(pool: asyncpg.Pool) -> None:
    held = HeldConnection(pool)

    assert len(await backends(held, 5)) == 1
    assert pool.get_size() - pool.get_idle_size() == 1  # kept between statements

    await held.release()
    await asyncio.wait_for(pool.close(), 10)  # nothing is still held


async def test_a_failed_statement_gives_the_connection_back(pool: asyncpg.Pool) -> None:
    held = HeldConnection(pool)
    [first] = await backends(held, 1)

    with pytest.raises(asyncpg.DivisionByZeroError):
        await held.fetchrow("SELECT 1 / 0")
    assert pool.get_size() == pool.get_idle_size()  # given back
    # The next statement takes one from the pool again (the same one: it was sound).
    assert await backends(held, 1) == {first}

    await held.release()
    await asyncio.wait_for(pool.close(), 10)


async def test_a_broken_connection_is_replaced(
    pool: asyncpg.Pool, database_url: str
) -> None:
    held = HeldConnection(pool)
    [first] = await backends(held, 1)
    killer = await asyncpg.connect(database_url)
    try:
        await killer.execute("SELECT pg_terminate_backend($1)", first)
    finally:
        await killer.close()

    with pytest.raises(
        (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError)
    ):
        await held.fetchrow(BACKEND)
    [second] = await backends(held, 1)
    assert second != first

    await held.release()


async def test_a_small_pool_is_used_per_statement(database_url: str) -> None:
    async with asyncpg.create_pool(
        database_url, min_size=1, max_size=KEEP_FROM_POOL_SIZE - 1
    ) as small:
        held = HeldConnection(small)
        await backends(held, 3)
        # Nothing kept: every connection the pool opened is idle again.
        assert small.get_idle_size() == small.get_size()
