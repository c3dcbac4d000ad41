"""A real MCP server (the official SDK) that polls its clients (SEP-1699): it keeps
its events in an event store, closes a call's SSE stream as soon as the tool starts,
and delivers the result only on a GET resumed with ``Last-Event-ID``. The tool counts
its runs in its own store, the ground truth for "ran once"."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.types import JSONRPCMessage

from tests.integration.mcp_support import Seen, ToolStore, observed, serve_asgi


class MemoryEventStore(EventStore):
    """Every event of every stream, in order, as the SDK's example server keeps them.
    ``forgetful``: it keeps ids but replays nothing (a server that lost its events)."""

    def __init__(self, *, forgetful: bool = False) -> None:
        self.events: list[tuple[str, str, JSONRPCMessage | None]] = []
        self.forgetful = forgetful

    async def store_event(self, stream_id: str, message: JSONRPCMessage | None) -> str:
        event_id = str(len(self.events) + 1)
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(
        self, last_event_id: str, send_callback: EventCallback
    ) -> str | None:
        ids = [event_id for event_id, _, _ in self.events]
        if self.forgetful or last_event_id not in ids:
            return None
        index = ids.index(last_event_id)
        stream_id = self.events[index][1]
        for event_id, stream, message in self.events[index + 1 :]:
            if stream == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


@dataclass
class PollingStore:
    """What the polling server did: runs per tool, and each HTTP request it saw."""

    calls: Counter[str] = field(default_factory=Counter)
    closed: asyncio.Event = field(default_factory=asyncio.Event)  # a stream was cut
    seen: ToolStore = field(default_factory=ToolStore)

    def requests(self, method: str) -> list[Seen]:
        return [seen for seen in self.seen.seen if seen.method == method]


def build_polling_server(store: PollingStore) -> MCPServer:
    server = MCPServer("invoices")

    @server.tool()
    async def settle_invoice(invoice: str, ctx: Context) -> dict[str, Any]:
        """Settle an invoice; the answer comes on the resumed stream."""
        store.calls["settle_invoice"] += 1
        await ctx.close_sse_stream()  # the client must come back for the result
        store.closed.set()
        return {"settlement": f"st_{store.calls['settle_invoice']}", "invoice": invoice}

    @server.tool()
    async def preview_invoice(invoice: str, ctx: Context) -> dict[str, Any]:
        """Read-only; polls too: its client resumes the stream through the proxy."""
        store.calls["preview_invoice"] += 1
        await ctx.close_sse_stream()
        store.closed.set()
        return {"preview": invoice}

    return server


@asynccontextmanager
async def serve_polling_mcp(
    store: PollingStore, *, retry_ms: int = 50, forgetful: bool = False
) -> AsyncIterator[str]:
    """Serve the polling server; yields its base URL (the endpoint is /mcp)."""
    app = observed(
        build_polling_server(store).streamable_http_app(
            event_store=MemoryEventStore(forgetful=forgetful), retry_interval=retry_ms
        ),
        store.seen,
    )
    async with serve_asgi(app) as url:
        yield url


POLLING_ROUTES = """\
version: 1
contracts:
  - name: invoices.settle
    version: "1"
    safety: unsafe
    timeout: {timeout}
routes:
  - name: invoices-mcp
    match: {{path: /mcp}}
    upstream: {upstream}
    mcp:
      tools:
        settle_invoice: {{contract: invoices.settle}}
      read_only: [preview_invoice]
"""


def polling_routes(upstream: str, *, timeout: str = "5s") -> str:
    return POLLING_ROUTES.format(upstream=upstream, timeout=timeout)
