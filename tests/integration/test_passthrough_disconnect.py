"""A client that closes a passed-through stream is logged as what it is: one line, no
traceback, no "unexpected error"."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from aiohttp import web

from tests.integration.harness import address, running_broker, serve_handler


async def events(request: web.Request) -> web.StreamResponse:
    """An endless server-sent event stream, until the reader goes away."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    number = 0
    try:
        while True:
            number += 1
            await response.write(f"id: {number}\ndata: tick {number}\n\n".encode())
            await asyncio.sleep(0.01)  # pacing the stream, not synchronisation
    except ConnectionError:
        pass
    return response


async def test_a_client_closing_a_passed_through_stream_is_one_quiet_line(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="effect_broker")
    async with (
        serve_handler(events) as upstream,
        running_broker(database_url, tmp_path) as broker,
    ):
        reader, writer = await asyncio.open_connection(*address(broker.proxy_url))
        host = address(upstream)[0]
        writer.write(f"GET {upstream}/events HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200"), head
        assert b"tick" in await asyncio.wait_for(reader.read(1024), 5)
        writer.close()
        await writer.wait_closed()

        def gone() -> list[logging.LogRecord]:
            return [r for r in caplog.records if "client closed" in r.getMessage()]

        async with asyncio.timeout(10):
            while not gone():
                await asyncio.sleep(0.02)
        assert len(gone()) == 1
        assert gone()[0].exc_info is None
        assert not [r for r in caplog.records if "unexpected" in r.getMessage()]
        assert not [r for r in caplog.records if r.exc_info]
