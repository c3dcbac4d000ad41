"""A server that sends a tool call's result on an SSE stream and leaves the stream
open (it may mean to send more, or it simply never closes it). The JSON-RPC response
for the call's id is the whole answer: the proxy stops reading there, settles the
effect and answers the client at once, instead of waiting for the stream to end and
calling the answer lost when the contract's timeout cuts it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from aiohttp import web

from tests.integration.harness import running_broker, serve_handler
from tests.integration.mcp_support import mcp_routes, raw_call, settled_rows

DEADLINE = 20.0
# The contract's timeout, far beyond the deadline: an answer taken only once the
# stream is cut would come too late to pass.
TIMEOUT = "60s"


class OpenStreamServer:
    """Answers each tools/call on an SSE stream it holds open until the test ends;
    counts the calls and notes every stream still open."""

    def __init__(self) -> None:
        self.calls = 0
        self.open_streams = 0
        self.closing = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        message = json.loads(await request.read())
        self.calls += 1
        stream = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await stream.prepare(request)
        progress = {
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": 1, "progress": 1},
        }
        result = {
            "jsonrpc": "2.0",
            "id": message["id"],
            "result": {
                "content": [{"type": "text", "text": "ok"}],
                "structuredContent": {"charge_id": f"ch_{self.calls}"},
            },
        }
        for event in (progress, result):
            await stream.write(f"event: message\ndata: {json.dumps(event)}\n\n".encode())
        self.open_streams += 1
        try:
            await self.closing.wait()  # the stream stays open: no end, no more events
        finally:
            self.open_streams -= 1
        return stream


async def test_a_result_on_a_stream_left_open_settles_at_once(
    database_url: str, tmp_path: Path
) -> None:
    server = OpenStreamServer()
    arguments = {"to": "ada@example.com", "operation_key": "open-1"}
    async with serve_handler(server.handle) as upstream:
        try:
            async with running_broker(
                database_url,
                tmp_path,
                routes=lambda _: mcp_routes(upstream, timeout=TIMEOUT),
            ) as broker:
                answer = await asyncio.wait_for(
                    raw_call(broker, "call-1", "send_receipt_email", arguments), DEADLINE
                )
                rows = await settled_rows(database_url)
                retry = await asyncio.wait_for(
                    raw_call(broker, "call-2", "send_receipt_email", arguments), DEADLINE
                )
        finally:
            server.closing.set()
    assert answer.status == 200, answer
    assert answer.json["id"] == "call-1"
    assert answer.json["result"]["structuredContent"] == {"charge_id": "ch_1"}, answer
    assert rows == [("open-1", "succeeded")]
    assert retry.headers["Idempotent-Replayed"] == "true", retry
    assert retry.json["result"]["structuredContent"] == {"charge_id": "ch_1"}
    assert server.calls == 1
