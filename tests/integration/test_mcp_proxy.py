"""MCP through the proxy with the official SDK on both ends: a ``ClientSession`` over
Streamable HTTP, the proxy's MCP route, and a real MCP server counting what it ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError

from tests.integration.harness import ledger_rows, request, running_broker
from tests.integration.mcp_support import (
    ToolStore,
    client,
    mcp_broker,
    mcp_routes,
    serve_mcp,
    structured,
)


async def test_mirrored_schema_requires_the_operation_key(
    database_url: str, tmp_path: Path
) -> None:
    store = ToolStore()
    async with mcp_broker(database_url, tmp_path, store) as broker, client(broker) as s:
        tools = {tool.name: tool for tool in (await s.list_tools()).tools}
    charge = tools["create_charge"].input_schema
    assert "operation_key" in charge["required"]
    assert charge["properties"]["operation_key"]["type"] == "string"
    assert "retry" in charge["properties"]["operation_key"]["description"]
    assert "operation_key" not in tools["get_balance"].input_schema.get("properties", {})
    assert "operation_key" not in tools["delete_everything"].input_schema.get(
        "properties", {}
    )


async def test_two_identical_calls_run_once(database_url: str, tmp_path: Path) -> None:
    store = ToolStore()
    async with mcp_broker(database_url, tmp_path, store) as broker:
        arguments = {"amount": 42, "currency": "eur", "operation_key": "order-1:charge"}
        async with client(broker) as first:
            one = await first.call_tool("create_charge", arguments)
        async with client(broker) as second:  # a retry from a new session
            two = await second.call_tool("create_charge", arguments)
        rows = await ledger_rows(database_url)
    assert store.calls["create_charge"] == 1
    assert structured(one) == structured(two) == {"charge_id": "ch_1", "amount": 42}
    # The key never reached the server; the ledger holds it once, settled.
    assert store.received == [("create_charge", {"amount": 42, "currency": "eur"})]
    assert [(r["operation_key"], r["status"]) for r in rows] == [
        ("order-1:charge", "succeeded")
    ]


async def test_same_key_other_arguments_is_refused(
    database_url: str, tmp_path: Path
) -> None:
    store = ToolStore()
    async with mcp_broker(database_url, tmp_path, store) as broker, client(broker) as s:
        await s.call_tool(
            "create_charge", {"amount": 1, "currency": "eur", "operation_key": "k1"}
        )
        with pytest.raises(MCPError) as refused:
            await s.call_tool(
                "create_charge", {"amount": 2, "currency": "eur", "operation_key": "k1"}
            )
    assert store.calls["create_charge"] == 1
    data = refused.value.error.data
    assert data["status"] == 422 and data["type"].endswith("/payload-mismatch")
    assert data["effect_id"]


async def test_missing_key_says_what_to_send(database_url: str, tmp_path: Path) -> None:
    store = ToolStore()
    async with mcp_broker(database_url, tmp_path, store) as broker, client(broker) as s:
        with pytest.raises(MCPError) as refused:
            await s.call_tool("create_charge", {"amount": 1, "currency": "eur"})
    assert "operation_key" in refused.value.error.message
    assert store.calls["create_charge"] == 0


async def test_read_only_tool_is_never_recorded(
    database_url: str, tmp_path: Path
) -> None:
    store = ToolStore()
    async with mcp_broker(database_url, tmp_path, store) as broker, client(broker) as s:
        first = await s.call_tool("get_balance", {})
        await s.call_tool("get_balance", {})
        rows = await ledger_rows(database_url)
    assert structured(first) in ({"result": 100}, 100)
    assert store.calls["get_balance"] == 2
    assert rows == []


async def test_unlisted_tool_is_refused_in_strict_mode(
    database_url: str, tmp_path: Path
) -> None:
    store = ToolStore()
    async with mcp_broker(database_url, tmp_path, store) as broker, client(broker) as s:
        with pytest.raises(MCPError) as refused:
            await s.call_tool("delete_everything", {})
    assert "not classified" in refused.value.error.message
    assert store.calls["delete_everything"] == 0


async def test_unlisted_tool_passes_when_configured(
    database_url: str, tmp_path: Path
) -> None:
    store = ToolStore()
    async with (
        mcp_broker(database_url, tmp_path, store, unclassified="pass") as broker,
        client(broker) as s,
    ):
        await s.call_tool("delete_everything", {})
        rows = await ledger_rows(database_url)
    assert store.calls["delete_everything"] == 1
    assert rows == []


async def test_streamed_result_replays_as_json(database_url: str, tmp_path: Path) -> None:
    """The SDK server streams every answer as SSE; a replay is plain JSON under the
    retry's own id, with the effect headers."""
    store = ToolStore()
    async with mcp_broker(database_url, tmp_path, store) as broker:
        async with client(broker) as s:
            live = await s.call_tool(
                "create_charge", {"amount": 7, "currency": "usd", "operation_key": "k7"}
            )
        # A raw retry of the same call, outside any session (the server never sees it).
        retry = await request(
            "POST",
            f"{broker.proxy_url}/mcp",
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                "Operation-Key": "k7",  # the key by header: the arguments lack it
            },
            data=json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": "retry-99",
                    "method": "tools/call",
                    "params": {
                        "name": "create_charge",
                        "arguments": {"currency": "usd", "amount": 7},
                        "_meta": {"progressToken": 5},
                    },
                }
            ),
        )
        assert retry.status == 200, retry
        assert retry.headers["Content-Type"].startswith("application/json")
        assert retry.headers["Idempotent-Replayed"] == "true"
        assert retry.headers["Effect-Status"] == "succeeded"
        assert retry.headers["Effect-Id"]
        body = retry.json
    assert body.get("id") == "retry-99", body
    assert body["result"]["structuredContent"] == structured(live)
    assert store.calls["create_charge"] == 1


async def test_hanging_unsafe_tool_is_unknown_and_never_resent(
    database_url: str, tmp_path: Path
) -> None:
    store = ToolStore()
    async with mcp_broker(database_url, tmp_path, store) as broker, client(broker) as s:
        arguments = {"to": "a@example.com", "operation_key": "mail-1"}
        with pytest.raises(MCPError) as first:
            await s.call_tool("send_receipt_email", arguments)
        with pytest.raises(MCPError) as second:
            await s.call_tool("send_receipt_email", arguments)
        rows = await ledger_rows(database_url)
    assert store.calls["send_receipt_email"] == 1
    for refused in (first, second):
        data = refused.value.error.data
        assert data["type"].endswith("/outcome-unknown"), data
        assert data["effect_status"] == "outcome_unknown" and data["effect_id"]
    assert [(r["operation_key"], r["status"]) for r in rows] == [
        ("mail-1", "outcome_unknown")
    ]


async def test_a_lost_idempotent_result_is_resent_with_the_same_key_and_done_once(
    database_url: str, tmp_path: Path
) -> None:
    """The server committed and went silent: the retry is sent again, under the same
    derived key, and the server's own deduplication returns the first capture."""
    store = ToolStore()
    async with mcp_broker(database_url, tmp_path, store) as broker, client(broker) as s:
        arguments = {"order_id": "o-9", "operation_key": "capture-9"}
        with pytest.raises(MCPError) as lost:
            await s.call_tool("capture_payment", arguments)
        retry = await s.call_tool("capture_payment", arguments)
        rows = await ledger_rows(database_url)
    assert lost.value.error.data["type"].endswith("/outcome-unknown")
    assert retry.content[0].text == "cap_o-9"
    keys = [received["idempotency_key"] for _, received in store.received]
    assert len(keys) == 2 and keys[0] == keys[1] != "capture-9"
    assert store.captures == {keys[0]: "cap_o-9"}  # captured once
    assert [(r["operation_key"], r["status"]) for r in rows] == [
        ("capture-9", "succeeded")
    ]


async def test_idempotency_argument_carries_the_derived_key(
    database_url: str, tmp_path: Path
) -> None:
    store = ToolStore()
    async with mcp_broker(database_url, tmp_path, store) as broker, client(broker) as s:
        await s.call_tool("refund", {"charge_id": "ch_1", "operation_key": "refund-1"})
    [(_, received)] = store.received
    assert received["charge_id"] == "ch_1"
    derived = received["idempotency_key"]
    assert derived and derived != "refund-1"  # the derived key, never the caller's


async def test_stateless_server_without_session(
    database_url: str, tmp_path: Path
) -> None:
    """A server without sessions (stateless_http): calls still replay by key."""
    store = ToolStore()
    async with (
        serve_mcp(store, stateless=True) as upstream,
        running_broker(
            database_url, tmp_path, routes=lambda _: mcp_routes(upstream)
        ) as broker,
    ):
        arguments = {"amount": 5, "currency": "eur", "operation_key": "s-1"}
        async with client(broker) as s:
            one = await s.call_tool("create_charge", arguments)
            two = await s.call_tool("create_charge", arguments)
    assert structured(one) == structured(two)
    assert store.calls["create_charge"] == 1


async def test_a_settled_call_retried_again_is_answered_from_memory(
    database_url: str, tmp_path: Path
) -> None:
    """The receipt cache serves MCP retries as it serves HTTP ones: once a settled call
    has been replayed, its next retry never reaches the engine (or the ledger)."""
    store = ToolStore()
    arguments = {"amount": 7, "currency": "eur", "operation_key": "order-7:charge"}
    async with mcp_broker(database_url, tmp_path, store) as broker:
        async with client(broker) as s:
            first = await s.call_tool("create_charge", arguments)
            await s.call_tool("create_charge", arguments)  # replayed: now in memory
        engine = broker.state.engine
        submitted: list[object] = []

        async def refuse(intent: object) -> object:
            submitted.append(intent)
            raise AssertionError("a cached receipt must not reach the engine")

        engine.submit = refuse  # type: ignore[method-assign]
        async with client(broker) as s:
            third = await s.call_tool("create_charge", arguments)
            with pytest.raises(MCPError) as refused:
                await s.call_tool("create_charge", {**arguments, "amount": 8})
    assert submitted == []
    assert store.calls["create_charge"] == 1
    assert structured(third) == structured(first)
    assert refused.value.error.data["type"].endswith("/payload-mismatch")
