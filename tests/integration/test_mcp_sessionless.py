"""The sessionless 2026-07-28 revision end to end: the official SDK's ``Client``
negotiates it through the proxy (``server/discover``), then every call is one POST that
names itself in ``Mcp-Method``/``Mcp-Name`` and carries its envelope in ``_meta``, with
no session. The server is the SDK's own, counting what it really ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError

from tests.integration.harness import ledger_rows, request
from tests.integration.mcp_support import (
    REVISION,
    ToolStore,
    calls_seen,
    envelope,
    mcp_broker,
    modern,
    raw_call,
    structured,
)


async def test_two_identical_calls_run_once_without_a_session(
    database_url: str, tmp_path: Path
) -> None:
    store = ToolStore()
    arguments = {"amount": 42, "currency": "eur", "operation_key": "m-1"}
    async with mcp_broker(database_url, tmp_path, store) as broker:
        async with modern(broker) as first:
            tools = {tool.name: tool for tool in (await first.list_tools()).tools}
            one = await first.call_tool("create_charge", arguments)
        async with modern(broker) as second:  # a retry from another process
            two = await second.call_tool("create_charge", arguments)
        rows = await ledger_rows(database_url)
    assert "operation_key" in tools["create_charge"].input_schema["required"]
    assert store.calls["create_charge"] == 1
    assert structured(one) == structured(two) == {"charge_id": "ch_1", "amount": 42}
    assert store.received == [("create_charge", {"amount": 42, "currency": "eur"})]
    assert [(r["operation_key"], r["status"]) for r in rows] == [("m-1", "succeeded")]
    # What reached the server was the new revision: named in headers, no session.
    [sent] = calls_seen(store, "create_charge")
    assert sent.headers["mcp-protocol-version"] == REVISION
    assert sent.headers["mcp-method"] == "tools/call"
    assert sent.headers["mcp-name"] == "create_charge"
    assert not any("mcp-session-id" in seen.headers for seen in store.seen)


async def test_other_arguments_under_the_same_key_never_reach_the_server(
    database_url: str, tmp_path: Path
) -> None:
    store = ToolStore()
    async with mcp_broker(database_url, tmp_path, store) as broker, modern(broker) as c:
        await c.call_tool(
            "create_charge", {"amount": 1, "currency": "eur", "operation_key": "m-2"}
        )
        with pytest.raises(MCPError) as refused:
            await c.call_tool(
                "create_charge", {"amount": 2, "currency": "eur", "operation_key": "m-2"}
            )
    assert store.calls["create_charge"] == 1
    assert len(calls_seen(store, "create_charge")) == 1
    data = refused.value.error.data
    assert data["status"] == 422 and data["type"].endswith("/payload-mismatch")
    assert data["effect_id"]


async def test_read_only_is_unrecorded_and_unlisted_is_refused(
    database_url: str, tmp_path: Path
) -> None:
    store = ToolStore()
    async with mcp_broker(database_url, tmp_path, store) as broker, modern(broker) as c:
        await c.call_tool("get_balance", {})
        await c.call_tool("get_balance", {})
        with pytest.raises(MCPError) as refused:
            await c.call_tool("delete_everything", {})
        rows = await ledger_rows(database_url)
    assert store.calls["get_balance"] == 2 and rows == []
    assert len(calls_seen(store, "get_balance")) == 2  # passed through, headers kept
    assert "not classified" in refused.value.error.message
    assert store.calls["delete_everything"] == 0
    assert calls_seen(store, "delete_everything") == []


async def test_a_streamed_result_replays_as_json_under_the_retry_id(
    database_url: str, tmp_path: Path
) -> None:
    """The tool reports progress, so the server commits its answer to SSE; the
    replay is plain JSON under the retry's own id, without asking the server."""
    store = ToolStore()
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with mcp_broker(database_url, tmp_path, store) as broker:
        async with modern(broker) as c:
            live = await c.call_tool(
                "open_account",
                {"owner": "ada", "operation_key": "acct-1"},
                progress_callback=on_progress,
            )
        retry = await raw_call(
            broker, "retry-7", "open_account", {"owner": "ada", "operation_key": "acct-1"}
        )
    [sent] = calls_seen(store, "open_account")
    assert (sent.content_type or "").startswith("text/event-stream"), sent
    assert store.calls["open_account"] == 1
    assert retry.status == 200, retry
    assert retry.headers["Content-Type"].startswith("application/json")
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.headers["Effect-Status"] == "succeeded"
    assert retry.json["id"] == "retry-7"
    assert retry.json["result"]["structuredContent"] == structured(live)
    assert structured(live) == {"account": "acc_1", "owner": "ada"}


async def test_an_mcp_name_that_disagrees_with_the_body_is_refused(
    database_url: str, tmp_path: Path
) -> None:
    """An intermediary routing by ``Mcp-Name`` must not see one tool while the
    server runs another: the call is refused before it is recorded or forwarded."""
    store = ToolStore()
    charge = {"amount": 9, "currency": "eur", "operation_key": "m-9"}
    async with mcp_broker(database_url, tmp_path, store) as broker:
        mismatch = await raw_call(
            broker, "x-1", "create_charge", charge, name_header="get_balance"
        )
        # The same call with a truthful header is accepted and recorded.
        accepted = await raw_call(broker, "x-2", "create_charge", charge)
        rows = await ledger_rows(database_url)
    # Refused by the proxy itself (the server, which checks too, never saw it).
    assert calls_seen(store, "get_balance") == []
    assert len(calls_seen(store, "create_charge")) == 1
    error = mismatch.json["error"]
    assert mismatch.status == 400, mismatch
    assert mismatch.json["id"] == "x-1"
    assert error["code"] == -32020 and "Mcp-Name" in error["message"], error
    assert error["data"]["type"].endswith("/invalid-mcp-message")
    assert accepted.status == 200 and "result" in accepted.json, accepted
    assert store.calls == {"create_charge": 1}
    assert [(r["operation_key"], r["status"]) for r in rows] == [("m-9", "succeeded")]


@pytest.mark.parametrize("left_out", ["Mcp-Method", "Mcp-Name"])
async def test_a_request_of_the_revision_without_its_routing_headers_is_refused(
    database_url: str, tmp_path: Path, left_out: str
) -> None:
    """From 2026-07-28 a POST must name itself in Mcp-Method (and Mcp-Name for a
    tools/call): one that leaves either out is a 400 -32020, never forwarded."""
    store = ToolStore()
    charge = {"amount": 5, "currency": "eur", "operation_key": "m-5"}
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Mcp-Protocol-Version": REVISION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "create_charge",
    }
    del headers[left_out]
    async with mcp_broker(database_url, tmp_path, store) as broker:
        refused = await request(
            "POST",
            f"{broker.proxy_url}/mcp",
            headers=headers,
            data=json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": "h-1",
                    "method": "tools/call",
                    "params": {
                        "name": "create_charge",
                        "arguments": charge,
                        "_meta": envelope(),
                    },
                }
            ),
        )
        rows = await ledger_rows(database_url)
    assert refused.status == 400, refused
    assert refused.json["error"]["code"] == -32020
    assert left_out in refused.json["error"]["message"]
    assert store.calls == {} and rows == []


async def test_a_replay_takes_the_shape_of_the_retrys_revision(
    database_url: str, tmp_path: Path
) -> None:
    """Recorded by a 2026-07-28 client (``resultType: complete``), replayed to a
    2025-11-25 retry without it: each revision gets the shape it requires."""
    store = ToolStore()
    charge = {"amount": 7, "currency": "eur", "operation_key": "m-7"}
    async with mcp_broker(database_url, tmp_path, store) as broker:
        first = await raw_call(broker, "r-1", "create_charge", charge)
        legacy = await request(
            "POST",
            f"{broker.proxy_url}/mcp",
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                "Mcp-Protocol-Version": "2025-11-25",
            },
            data=json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": "r-2",
                    "method": "tools/call",
                    "params": {"name": "create_charge", "arguments": charge},
                }
            ),
        )
    assert first.json["result"]["resultType"] == "complete", first
    assert legacy.headers.get("Idempotent-Replayed") == "true", legacy
    assert "resultType" not in legacy.json["result"]
    assert legacy.json["result"]["content"] == first.json["result"]["content"]
    assert store.calls == {"create_charge": 1}
