"""The MCP routes' open GET streams, ended together when the process stops.

A client's GET on an MCP endpoint is the server's event stream: it stays open as long
as the session lives, carries no effect, and the transport lets a client resume it
(``Last-Event-ID``) on another connection. Held open through a shutdown, each one
kept the process alive until the server's own timeout (60-120 s); ended at once, the
client reconnects (to another worker, or to this proxy once it is back), and the
drain deadline is spent on what it is for: recorded calls still in flight.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
from aiohttp import web

log = logging.getLogger("effect_broker.mcp")


class OpenStreams:
    """Relays GET streams from an MCP server to its clients until ``end``."""

    def __init__(self) -> None:
        self._open: set[asyncio.Future[None]] = set()
        self.ended = False

    async def relay(
        self, upstream: aiohttp.ClientResponse, out: web.StreamResponse
    ) -> None:
        """Copy ``upstream`` to ``out`` until it ends or the process stops; the
        caller ends ``out`` either way (a clean end of stream the client resumes)."""
        if self.ended:
            return
        copy = asyncio.ensure_future(_copy(upstream, out))
        self._open.add(copy)
        try:
            await asyncio.wait({copy})
        finally:
            self._open.discard(copy)
            if not copy.done():  # this handler itself was cancelled
                copy.cancel()
        if not copy.cancelled():
            copy.result()  # the stream's own end, or its error

    async def end(self) -> None:
        """End every open stream (and any opened from now on) at once."""
        self.ended = True
        if self._open:
            log.info("ending %d open MCP GET stream(s) for shutdown", len(self._open))
        for copy in list(self._open):
            copy.cancel()


async def _copy(upstream: aiohttp.ClientResponse, out: web.StreamResponse) -> None:
    async for chunk in upstream.content.iter_any():
        await out.write(chunk)
