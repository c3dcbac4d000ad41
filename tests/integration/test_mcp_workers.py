"""``serve --workers 2`` and the cancellations of a recorded MCP call.

The kernel spreads a client's connections over the workers, so a
``notifications/cancelled`` often reaches another worker than the one running the
call. Every worker must still withhold it: the running calls are shared through the
ledger, each one a row from before its request leaves until it settles. Real
processes, a real SDK server that counts what it ran and what was stopped."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import asyncpg

from tests.integration.mcp_support import (
    ToolStore,
    cancellations_seen,
    mcp_routes,
    open_session,
    serve_mcp,
    session_call,
    session_cancel,
    settled_rows,
)
from tests.integration.workers_support import DEADLINE, serving
from tests.support import poll

WITHHELD = re.compile(r"\[worker (\d+)\] withheld a cancellation of a recorded MCP call")
# Far more cancellations than it takes the kernel to give each worker some.
MOST_CANCELLATIONS = 200


async def running_rows(database_url: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        count: int = await conn.fetchval("SELECT count(*) FROM mcp_running_calls")
    finally:
        await conn.close()
    return count


async def test_every_worker_withholds_a_cancellation_of_a_recorded_call(
    database_url: str, tmp_path: Path
) -> None:
    store = ToolStore()
    key = "tr-workers-1"
    async with (
        serve_mcp(store) as upstream,
        serving(
            database_url,
            tmp_path,
            upstream,
            routes_text=mcp_routes(upstream, timeout="60s"),
        ) as served,
    ):
        session = await open_session(served.proxy)
        call = asyncio.create_task(
            session_call(
                served.proxy,
                session,
                1,
                "transfer",
                {"amount": 9, "operation_key": key},
            )
        )
        await asyncio.wait_for(store.started.wait(), DEADLINE)

        def withheld_by() -> set[str]:
            return {found[1] for found in map(WITHHELD.search, served.lines) if found}

        sent = 0
        deadline = time.monotonic() + DEADLINE
        # Cancel until both workers have withheld some, or one was let through.
        while withheld_by() != {"1", "2"} and not cancellations_seen(store):
            assert sent < MOST_CANCELLATIONS and time.monotonic() < deadline, (
                f"{sent} cancellations, withheld by workers {withheld_by()}"
            )
            answer = await session_cancel(served.proxy, session, 1 if sent % 2 else "1")
            assert answer.status == 202, answer
            sent += 1
        reached_server = cancellations_seen(store)
        store.release.set()
        finished = await asyncio.wait_for(call, DEADLINE)
        rows = await settled_rows(database_url)

        async def no_running_rows() -> bool:
            return await running_rows(database_url) == 0

        await poll(
            no_running_rows,
            within=DEADLINE,
            every=0.05,
            what="the running call's row removed",
        )
    assert reached_server == []
    assert store.interrupted["transfer"] == 0
    assert store.calls["transfer"] == 1
    assert rows == [(key, "succeeded")]
    assert finished.status == 200, finished
    assert finished.json["result"]["structuredContent"] == {
        "transfer_id": "tr_1",
        "amount": 9,
    }
