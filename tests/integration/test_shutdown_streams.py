"""SIGTERM with an MCP client's GET stream (the server's event stream) open through
the proxy: the stream ends cleanly at once (the client may resume it) and the process
exits within the drain deadline, not when the stream's server would have let go."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import aiohttp

from tests.integration.mcp_support import ToolStore, mcp_routes, serve_mcp
from tests.integration.serve_support import serve_process

DRAIN = 8.0
# Interpreter exit, the ledger's pool and the reconciler's stop, on a loaded machine.
MARGIN = 4.0
REVISION = "2025-11-25"


async def open_event_stream(
    session: aiohttp.ClientSession, endpoint: str
) -> aiohttp.ClientResponse:
    """A session begun through the proxy, and its GET stream, open (head received)."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": REVISION,
            "capabilities": {},
            "clientInfo": {"name": "shutdown-test", "version": "1"},
        },
    }
    async with session.post(endpoint, json=hello, headers=headers) as answer:
        assert answer.status == 200, await answer.text()
        session_id = answer.headers["Mcp-Session-Id"]
        await answer.read()
    headers = {
        **headers,
        "Mcp-Session-Id": session_id,
        "MCP-Protocol-Version": REVISION,
    }
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    async with session.post(endpoint, json=initialized, headers=headers) as answer:
        assert answer.status == 202, await answer.text()
    stream = await session.get(
        endpoint,
        headers={
            "Accept": "text/event-stream",
            "Mcp-Session-Id": session_id,
            "MCP-Protocol-Version": REVISION,
        },
    )
    assert stream.status == 200, await stream.text()
    assert stream.headers["Content-Type"].startswith("text/event-stream")
    return stream


async def test_sigterm_ends_open_mcp_get_streams_within_the_drain_deadline(
    database_url: str, tmp_path: Path
) -> None:
    store = ToolStore()
    async with (
        serve_mcp(store) as upstream,
        serve_process(
            database_url,
            mcp_routes(upstream, unclassified="pass"),
            tmp_path,
            EFFECT_BROKER_DRAIN_TIMEOUT=f"{DRAIN:g}s",
        ) as served,
        aiohttp.ClientSession() as session,
    ):
        stream = await open_event_stream(session, f"{served.proxy}/mcp")
        assert served.process.returncode is None
        began = time.monotonic()
        served.process.send_signal(signal.SIGTERM)
        # The stream ends as a stream ends (the chunked terminator), not cut off:
        # a client reads it to its end without an error and resumes elsewhere.
        async with asyncio.timeout(DRAIN + MARGIN):
            await stream.read()
            ended = time.monotonic() - began
            code = await served.process.wait()
        exited = time.monotonic() - began
    assert ended < DRAIN, f"the stream was held {ended:.1f}s: {served.stderr}"
    assert exited < DRAIN + MARGIN, served.stderr
    assert code == 0, served.stderr
