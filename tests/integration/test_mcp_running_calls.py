"""The ledger's shared table of running MCP calls: a row counts while its call runs,
is gone when the call ends, and a row nobody ended (its worker died) stops counting
at its expiry and is pruned by a later call, so it never withholds forever."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import asyncpg

from effect_broker.store import Store

LONG = timedelta(hours=1)


def key(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


async def rows(database_url: str) -> list[bytes]:
    conn = await asyncpg.connect(database_url)
    try:
        found = await conn.fetch("SELECT call_key FROM mcp_running_calls")
    finally:
        await conn.close()
    return [bytes(row["call_key"]) for row in found]


async def test_a_call_counts_until_it_ends_and_leaves_no_row(
    store: Store, database_url: str
) -> None:
    first = await store.begin_mcp_call(key("a"), expires_in=LONG)
    second = await store.begin_mcp_call(key("a"), expires_in=LONG)  # one id, twice
    assert await store.mcp_call_running(key("a"))
    assert not await store.mcp_call_running(key("b"))
    await store.end_mcp_call(first)
    assert await store.mcp_call_running(key("a"))  # the other one still runs
    await store.end_mcp_call(second)
    assert not await store.mcp_call_running(key("a"))
    assert await rows(database_url) == []


async def test_a_row_nobody_ended_stops_counting_at_its_expiry_and_is_pruned(
    store: Store, database_url: str
) -> None:
    # A worker that died mid-call never deletes its row; here it has expired.
    await store.begin_mcp_call(key("dead"), expires_in=-timedelta(seconds=1))
    assert not await store.mcp_call_running(key("dead"))
    assert await rows(database_url) == [key("dead")]
    live = await store.begin_mcp_call(key("live"), expires_in=LONG)
    assert await rows(database_url) == [key("live")]
    await store.end_mcp_call(live)
    assert await rows(database_url) == []
