"""A tool that asks the client for input (elicitation) during a recorded call.

On the 2026-07-28 revision the server asks in an ``input_required`` result: a complete
answer that is never stored as final, so the client's next round (the same arguments,
plus its answers) is sent under the same key and the tool runs once. The earlier
revisions ask with a request on the call's own stream, which the proxy does not relay:
it stops reading there and says so at once, instead of waiting for the timeout."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.integration.harness import ledger_rows
from tests.integration.mcp_support import (
    REVISION,
    ToolStore,
    calls_seen,
    mcp_broker,
    structured,
)

DEADLINE = 20.0  # far below the contract's timeout: the proxy must not wait for it


class Approver:
    """The client's elicitation callback: approves, and counts what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(
        self, context: Any, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        self.asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approver": "grace"})


async def test_input_required_rounds_run_the_tool_once(
    database_url: str, tmp_path: Path
) -> None:
    store = ToolStore()
    approver = Approver()
    arguments = {"amount": 5, "operation_key": "payout-1"}
    async with mcp_broker(database_url, tmp_path, store, timeout="60s") as broker:
        url = f"{broker.proxy_url}/mcp"
        async with Client(url, elicitation_callback=approver, cache=None) as c:
            assert c.session.protocol_version == REVISION
            # Round one alone: the server's question, not a final answer.
            asked = await c.session.call_tool(
                "pay_out", arguments, allow_input_required=True
            )
            after_question = await ledger_rows(database_url)
            # The SDK's own loop: asked again, answered, and the tool runs.
            done = await c.call_tool("pay_out", arguments)
        async with Client(url, elicitation_callback=approver, cache=None) as again:
            replayed = await again.call_tool("pay_out", arguments)
        rows = await ledger_rows(database_url)
    assert isinstance(asked, types.InputRequiredResult), asked
    assert [r["status"] for r in after_question] == ["retryable"]
    assert structured(done) == {"payout": "po_1", "approver": "grace"}
    assert structured(replayed) == structured(done)
    assert store.calls["pay_out"] == 1
    assert approver.asked == ["Approve a payout of 5?"]  # the replay asks nothing
    assert [(r["operation_key"], r["status"]) for r in rows] == [
        ("payout-1", "succeeded")
    ]
    # The answer went upstream: the last round carried the client's input.
    assert len(calls_seen(store, "pay_out")) == 3


async def test_a_mid_call_server_request_is_refused_at_once(
    database_url: str, tmp_path: Path
) -> None:
    store = ToolStore()
    approver = Approver()
    arguments = {"amount": 5, "operation_key": "payout-2"}
    async with (
        mcp_broker(database_url, tmp_path, store, timeout="60s") as broker,
        streamable_http_client(f"{broker.proxy_url}/mcp") as (read, write),
        ClientSession(read, write, elicitation_callback=approver) as session,
    ):
        await session.initialize()
        assert session.protocol_version != REVISION
        async with asyncio.timeout(DEADLINE):
            with pytest.raises(MCPError) as first:
                await session.call_tool("pay_out", arguments)
            with pytest.raises(MCPError) as retry:
                await session.call_tool("pay_out", arguments)
        rows = await ledger_rows(database_url)
    error = first.value.error
    assert "elicitation/create" in error.message, error
    assert "does not relay" in error.message and "2026-07-28" in error.message
    assert error.data["type"].endswith("/outcome-unknown")
    assert error.data["effect_status"] == "outcome_unknown"
    # An unsafe tool: never sent again, the retry is told the same, nothing ran.
    assert retry.value.error.data["effect_id"] == error.data["effect_id"]
    assert len(calls_seen(store, "pay_out")) == 1
    assert approver.asked == [] and store.calls["pay_out"] == 0
    assert [(r["operation_key"], r["status"]) for r in rows] == [
        ("payout-2", "outcome_unknown")
    ]


async def test_an_unrecorded_call_relays_the_server_request(
    database_url: str, tmp_path: Path
) -> None:
    """A read-only tool is streamed both ways: the question reaches the client and
    its answer reaches the server, on the session's own revision."""
    store = ToolStore()
    approver = Approver()
    async with (
        mcp_broker(database_url, tmp_path, store) as broker,
        streamable_http_client(f"{broker.proxy_url}/mcp") as (read, write),
        ClientSession(read, write, elicitation_callback=approver) as session,
    ):
        await session.initialize()
        async with asyncio.timeout(DEADLINE):
            quoted = await session.call_tool("quote_payout", {"amount": 8})
        rows = await ledger_rows(database_url)
    assert quoted.content[0].text == "8 approved by grace"
    assert approver.asked == ["Approve a payout of 8?"]
    assert store.calls["quote_payout"] == 1 and rows == []
