"""A duplicate ``tools/call`` that arrives while the first runs waits for its result.

The official ``mcp`` client sends the same call twice with one operation key, the
second while the server is still running the first: the server runs the tool once,
and the second call is answered with the first one's result under its own JSON-RPC id
(the client pairs answers with requests by id, so a wrong id would never resolve),
marked as a replay. An answer is only sent once the first call ends, and only then.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.integration.harness import Broker, ledger_rows
from tests.integration.mcp_support import ToolStore, mcp_broker, structured
from tests.support import poll

DEADLINE = 10.0


@asynccontextmanager
async def observed_client(
    broker: Broker, answers: dict[Any, dict[str, str]]
) -> AsyncIterator[ClientSession]:
    """An official client session whose HTTP answers to ``tools/call`` are noted by
    the request's JSON-RPC id: the replay mark is a header the SDK does not surface."""

    async def note(response: httpx2.Response) -> None:
        try:
            message = json.loads(response.request.content)
        except ValueError:
            return
        if isinstance(message, dict) and message.get("method") == "tools/call":
            answers[message["id"]] = {k.lower(): v for k, v in response.headers.items()}

    timeout = httpx2.Timeout(30.0, read=60.0)
    async with (
        httpx2.AsyncClient(timeout=timeout, event_hooks={"response": [note]}) as http,
        streamable_http_client(f"{broker.proxy_url}/mcp", http_client=http) as (r, w),
        ClientSession(r, w) as session,
    ):
        await session.initialize()
        yield session


async def test_a_duplicate_tool_call_gets_the_first_result_under_its_own_id(
    database_url: str, tmp_path: Path
) -> None:
    store = ToolStore()
    answers: dict[Any, dict[str, str]] = {}
    arguments = {"amount": 7, "operation_key": "transfer-7"}
    async with (
        mcp_broker(database_url, tmp_path, store) as broker,
        observed_client(broker, answers) as session,
    ):
        waiters = broker.state.engine.wiring.waiters
        first = asyncio.create_task(session.call_tool("transfer", arguments))
        await asyncio.wait_for(store.started.wait(), DEADLINE)
        second = asyncio.create_task(session.call_tool("transfer", arguments))
        await poll(lambda: waiters.waiting == 1, what="the duplicate to wait")
        assert not first.done() and not second.done()
        store.release.set()
        original, duplicate = await asyncio.wait_for(
            asyncio.gather(first, second), DEADLINE
        )
        rows = await ledger_rows(database_url)

    assert store.calls["transfer"] == 1
    assert structured(original) == {"transfer_id": "tr_1", "amount": 7}
    assert structured(duplicate) == structured(original)
    assert not duplicate.is_error
    assert len(answers) == 2, answers  # two ids, each answered once
    by_replay = sorted(answers.values(), key=lambda h: "idempotent-replayed" in h)
    assert "idempotent-replayed" not in by_replay[0]
    assert by_replay[1]["idempotent-replayed"] == "true"
    assert by_replay[0]["effect-id"] == by_replay[1]["effect-id"]
    assert [row["status"] for row in rows] == ["succeeded"]
