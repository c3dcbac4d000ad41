"""Progress notifications of a recorded ``tools/call``, relayed while the call runs.

The engine reads a recorded call's SSE answer itself (it must judge and store it), so
the client would see nothing until the result. When the client asked for progress (a
``progressToken`` in the call's ``_meta``) and accepts SSE, the handler puts a
``ProgressRelay`` in ``current_relay`` before the engine's task starts; the answer's
watch (``jsonrpc.ServerRequestWatch``) offers it every ``notifications/progress`` it
reads, and the relay answers the client with an SSE stream: the notifications as they
come, then the call's result (or error) as the last event. Nothing else of the server's
stream is relayed, and the stored receipt is only the result: a replay has no progress.
"""

from __future__ import annotations

import asyncio
import contextlib
from contextvars import ContextVar

from aiohttp import web

# The relay of the call being recorded by the current task, if its client asked for one.
current_relay: ContextVar[ProgressRelay | None] = ContextVar(
    "effect_broker_mcp_progress", default=None
)


def wants_progress(request: web.Request, meta: object) -> bool:
    """A client that gave a progress token and reads SSE answers."""
    accepts = request.headers.get("Accept", "")
    return (
        isinstance(meta, dict)
        and meta.get("progressToken") is not None
        and "text/event-stream" in accepts.lower()
    )


def _event(data: bytes) -> bytes:
    return b"event: message\ndata: " + data.replace(b"\n", b"") + b"\n\n"


class ProgressRelay:
    """One client's SSE answer, opened at the first notification offered."""

    def __init__(self, request: web.Request) -> None:
        self._request = request
        self._pending: list[bytes] = []
        self._wake = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None
        self._closing = False
        self._gone = False
        self.out: web.StreamResponse | None = None

    def offer(self, notification: bytes) -> None:
        """A ``notifications/progress`` message (its JSON); called from the read."""
        if self._closing:
            return
        self._pending.append(notification)
        self._wake.set()
        if self._pump is None:
            self._pump = asyncio.get_running_loop().create_task(self._run())

    @property
    def started(self) -> bool:
        return self._pump is not None

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._flush()
            if self._closing and not self._pending:
                return

    async def _flush(self) -> None:
        pending, self._pending = self._pending, []
        if self._gone:
            return
        try:
            if self.out is None:
                self.out = web.StreamResponse(
                    headers={
                        "Content-Type": "text/event-stream",
                        "Cache-Control": "no-cache",
                    }
                )
                await self.out.prepare(self._request)
            for message in pending:
                await self.out.write(_event(message))
        except ConnectionError:
            self._gone = True  # the client left: the call still runs and settles

    async def finish(self, answer: web.StreamResponse) -> web.StreamResponse:
        """End the stream with the call's answer as its last event (the JSON-RPC
        message ``render`` built), and return the response the client got."""
        self._closing = True
        self._wake.set()
        if self._pump is not None:
            with contextlib.suppress(ConnectionError):
                await self._pump
        if self.out is None or self._gone:
            return self.out or answer
        body = answer.body if isinstance(answer, web.Response) else None
        with contextlib.suppress(ConnectionError):
            if isinstance(body, bytes) and body:
                await self.out.write(_event(body))
            await self.out.write_eof()
        return self.out
