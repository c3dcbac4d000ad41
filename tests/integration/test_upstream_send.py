"""One attempt is one request at the target: no client library retries behind the
state machine's back, and a closed send window writes not one byte.

The target here is a raw socket server that counts the requests it received, so a
hidden second try cannot hide.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

from effect_broker.engine.fence import SendWindow
from effect_broker.engine.upstream import Delivery, client_session, send

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok"


class CountingTarget:
    """Answers the first request on each connection, then reads the next one and
    closes without a word: the server-side close aiohttp would paper over."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes_seen = 0

    async def handle(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        answered = False
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.bytes_seen += len(head)
                length = next(
                    (
                        int(line.split(b":", 1)[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                await reader.readexactly(length)
                self.requests += 1
                if answered:
                    break
                writer.write(OK)
                await writer.drain()
                answered = True
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def counting_target() -> AsyncIterator[tuple[CountingTarget, str]]:
    target = CountingTarget()
    server = await asyncio.start_server(target.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield target, f"http://127.0.0.1:{port}/v1/things/1"
    finally:
        server.close()


async def put(session: object, url: str, window: SendWindow | None = None) -> Delivery:
    result = await send(
        session,  # type: ignore[arg-type]
        method="PUT",
        url=url,
        headers=[("Content-Type", "application/json")],
        body=b'{"a": 1}',
        timeout=timedelta(seconds=5),
        max_body=1024,
        window=window,
    )
    result.release()
    return result.delivery


async def test_a_closed_reused_connection_is_not_retried_silently() -> None:
    """aiohttp resends a PUT once when a kept-alive connection turns out closed; for
    an effect that is a second request nobody recorded."""
    async with counting_target() as (target, url), client_session(limit=1) as session:
        assert await put(session, url) is Delivery.ANSWERED
        second = await put(session, url)

        assert target.requests == 2, "one request per attempt, never a hidden third"
        assert second is Delivery.UNKNOWN


async def test_a_closed_window_writes_nothing_and_says_not_sent() -> None:
    closed = SendWindow(
        0.0, timedelta(seconds=2), timedelta(seconds=1), clock=lambda: 5.0
    )
    async with counting_target() as (target, url), client_session() as session:
        assert await put(session, url, closed) is Delivery.NOT_SENT
        assert closed.withheld
        assert (target.requests, target.bytes_seen) == (0, 0)

        # The same pooled session still sends what is inside its window.
        assert await put(session, url) is Delivery.ANSWERED
        assert target.requests == 1
