"""A client that hangs up mid-call does not cancel the tool call it started: the proxy
keeps reading the server's answer, so the effect settles with a receipt that the
client's retry is given, and the server runs the tool once."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.integration.harness import address
from tests.integration.mcp_support import (
    DEADLINE,
    ToolStore,
    envelope,
    mcp_broker,
    raw_call,
    settled_rows,
)


async def test_a_client_that_hangs_up_does_not_cancel_the_call(
    database_url: str, tmp_path: Path
) -> None:
    store = ToolStore()
    arguments = {"amount": 30, "operation_key": "tr-1"}
    async with mcp_broker(database_url, tmp_path, store) as broker:
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {
                    "name": "transfer",
                    "arguments": arguments,
                    "_meta": envelope(),
                },
            }
        ).encode()
        host, port = address(broker.proxy_url)
        _, writer = await asyncio.open_connection(host, port)
        writer.write(
            b"POST /mcp HTTP/1.1\r\n"
            + f"Host: {host}:{port}\r\n".encode()
            + b"Content-Type: application/json\r\n"
            + b"Accept: application/json, text/event-stream\r\n"
            + b"Mcp-Protocol-Version: 2026-07-28\r\n"
            + b"Mcp-Method: tools/call\r\nMcp-Name: transfer\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        await asyncio.wait_for(store.started.wait(), DEADLINE)  # the tool is running
        writer.close()  # the client hangs up before any answer
        await writer.wait_closed()
        store.release.set()  # only now may the tool finish
        rows = await settled_rows(database_url)
        retry = await raw_call(broker, "retry-1", "transfer", arguments)
    assert rows == [("tr-1", "succeeded")]
    assert store.calls["transfer"] == 1
    assert retry.headers["Idempotent-Replayed"] == "true", retry
    assert retry.json["id"] == "retry-1"
    assert retry.json["result"]["structuredContent"] == {
        "transfer_id": "tr_1",
        "amount": 30,
    }
