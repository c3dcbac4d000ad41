"""Hostile MCP messages: each gets a clear JSON-RPC error, nothing reaches the server,
and the proxy keeps serving the next good call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.integration.harness import Answer, request, running_broker
from tests.integration.mcp_support import ToolStore, client, mcp_routes, serve_mcp

HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
}


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


async def post(url: str, body: bytes, **headers: str) -> Answer:
    return await request("POST", url, headers={**HEADERS, **headers}, data=body)


async def test_hostile_messages(database_url: str, tmp_path: Path) -> None:
    store = ToolStore()
    charge = {"amount": 1, "currency": "eur", "operation_key": "h-1"}
    async with (
        serve_mcp(store) as upstream,
        running_broker(
            database_url,
            tmp_path,
            routes=lambda _: mcp_routes(upstream),
            max_request_bytes=4096,
        ) as broker,
    ):
        url = f"{broker.proxy_url}/mcp"
        batch = await post(url, json.dumps([call("create_charge", charge)]).encode())
        scalar = await post(url, b'"tools/call"')
        nameless = await post(
            url,
            json.dumps(
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {}}
            ).encode(),
        )
        large = await post(
            url,
            json.dumps(call("create_charge", {**charge, "memo": "x" * 5000})).encode(),
        )
        mismatch = await post(
            url,
            json.dumps(call("create_charge", charge)).encode(),
            **{"Mcp-Method": "tools/call", "Mcp-Name": "get_balance"},
        )
        wrong_method = await post(
            url,
            json.dumps(call("create_charge", charge)).encode(),
            **{"Mcp-Method": "tools/list"},
        )
        async with client(broker) as agent:  # still serving
            good = await agent.call_tool("create_charge", charge)
    assert batch.status == 400 and "batch" in batch.json["error"]["message"]
    assert scalar.status == 400 and scalar.json["error"]["code"] == -32600
    assert nameless.json["error"]["code"] == -32602
    assert "params.name" in nameless.json["error"]["message"]
    assert large.status == 413 and "4096" in large.json["error"]["message"]
    for refused in (mismatch, wrong_method):
        assert refused.status == 400, refused  # what the revision of -32020 requires
        assert refused.json["error"]["code"] == -32020, refused
        assert refused.json["id"] == 1
    assert "Mcp-Name" in mismatch.json["error"]["message"]
    assert not good.is_error
    assert store.calls["create_charge"] == 1 and store.calls["get_balance"] == 0
