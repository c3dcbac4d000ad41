"""The explorer's ledger relay on a real PostgreSQL: replies pass, stall and are cut."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from effect_broker.demo.explorer.relay import LedgerRelay, through, upstream_of


async def test_replies_stall_then_flow_and_a_drop_cuts_the_connection(
    database_url: str,
) -> None:
    relay = LedgerRelay(upstream_of(database_url))
    port = await relay.start()
    try:
        conn = await asyncpg.connect(through(database_url, port))
        assert await conn.fetchval("SELECT 1") == 1
        relay.stall()
        relay.stall()  # two overlapping stalls: both must end before replies flow
        late = asyncio.create_task(conn.fetchval("SELECT 2"))
        done, _ = await asyncio.wait({late}, timeout=0.3)
        assert not done  # the reply is held back while stalled
        relay.resume()
        done, _ = await asyncio.wait({late}, timeout=0.3)
        assert not done  # one stall is still on
        relay.resume()
        assert await asyncio.wait_for(late, 10) == 2
        assert relay.drop() == 1
        with pytest.raises((asyncpg.PostgresConnectionError, ConnectionError, OSError)):
            await asyncio.wait_for(conn.fetchval("SELECT 3"), 10)
        conn.terminate()
    finally:
        await relay.close()
