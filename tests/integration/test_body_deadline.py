"""A body that trickles in is cut off at EFFECT_BROKER_BODY_TIMEOUT.

A request head bounds nothing about its body: a client sending one byte a second held
its connection (and, with EFFECT_BROKER_MAX_CONNECTIONS=4, four such clients locked
everyone else out) for as long as it liked. Past the body deadline the request gets a
408 problem document, nothing is recorded or forwarded, and the connection is closed.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from aiohttp import web

from tests.integration.harness import (
    PROBLEMS,
    address,
    ledger_rows,
    request,
    running_broker,
    serve_handler,
)

BODY = json.dumps({"amount": 100, "currency": "usd", "order_id": "slow-1"}).encode()
DEADLINE_MS = 1000
DEADLINE = DEADLINE_MS / 1000


async def trickle(
    url: str, head: bytes, body: list[bytes], connected: asyncio.Event | None = None
) -> tuple[bytes, float]:
    """Send ``head``, then one piece of ``body`` every 100 ms until an answer (or the
    end of the body); the whole answer up to the close, and when it began, in seconds.
    ``connected`` is set once the connection is open and the head written."""
    reader, writer = await asyncio.open_connection(*address(url))
    started = time.monotonic()
    writer.write(head)
    await writer.drain()
    if connected is not None:
        connected.set()

    async def send_slowly() -> None:
        for piece in body:
            await asyncio.sleep(0.1)  # the attack's pace, not a synchronisation
            writer.write(piece)
            await writer.drain()

    sender = asyncio.create_task(send_slowly())
    try:
        async with asyncio.timeout(10 * DEADLINE):
            first = await reader.read(1)
            answered = time.monotonic() - started
            answer = first + await reader.read()  # up to the proxy's close
    finally:
        sender.cancel()
        writer.close()
    return answer, answered


def one_byte_each(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def post_head(target: str, key: str | None, *, chunked: bool = False) -> bytes:
    lines = [f"POST {target} HTTP/1.1", "Host: sidecar", "Content-Type: application/json"]
    if key is not None:
        lines.append(f"Operation-Key: {key}")
    lines.append(
        "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(BODY)}"
    )
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunked(data: bytes) -> list[bytes]:
    """``data`` as one-byte chunks, never terminated: the body never ends."""
    return [b"1\r\n" + data[i : i + 1] + b"\r\n" for i in range(len(data))]


def assert_408_and_closed(answer: bytes, answered: float) -> None:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer
    assert b"application/problem+json" in head
    assert b"Connection: close" in head
    problem = json.loads(body)
    assert problem["type"] == PROBLEMS + "request-timeout"
    assert "EFFECT_BROKER_BODY_TIMEOUT" in problem["detail"]
    assert DEADLINE <= answered < 5 * DEADLINE, answered


@pytest.mark.parametrize("encoding", ["length", "chunked"])
async def test_a_trickled_body_on_a_recorded_route_is_a_408_with_nothing_recorded(
    database_url: str, tmp_path: Path, encoding: str
) -> None:
    async with running_broker(
        database_url, tmp_path, body_timeout=f"{DEADLINE_MS}ms"
    ) as broker:
        is_chunked = encoding == "chunked"
        answer, answered = await trickle(
            broker.proxy_url,
            post_head("/payments/v1/charges", "slow-1", chunked=is_chunked),
            chunked(BODY) if is_chunked else one_byte_each(BODY),
        )

        assert_408_and_closed(answer, answered)
        assert await ledger_rows(database_url) == []
        assert broker.charges() == []
        # A body sent at once still goes through.
        normal = await request(
            "POST",
            f"{broker.proxy_url}/payments/v1/charges",
            headers={"Content-Type": "application/json", "Operation-Key": "fast-1"},
            data=BODY,
        )
        assert normal.status == 201, normal


@pytest.mark.parametrize("encoding", ["length", "chunked"])
async def test_a_trickled_pass_through_body_is_a_408_and_never_reaches_the_target(
    database_url: str, tmp_path: Path, encoding: str
) -> None:
    received: list[bytes] = []

    async def record(request: web.Request) -> web.Response:
        received.append(await request.read())
        return web.Response(text="ok")

    async with (
        serve_handler(record) as upstream,
        running_broker(database_url, tmp_path, body_timeout=f"{DEADLINE_MS}ms") as broker,
    ):
        is_chunked = encoding == "chunked"
        answer, answered = await trickle(
            broker.proxy_url,
            post_head(f"{upstream}/unmatched", None, chunked=is_chunked),
            chunked(BODY) if is_chunked else one_byte_each(BODY),
        )

        assert_408_and_closed(answer, answered)
        assert received == []
        assert await ledger_rows(database_url) == []


async def test_a_slow_but_complete_body_within_the_deadline_goes_through(
    database_url: str, tmp_path: Path
) -> None:
    async with running_broker(database_url, tmp_path, body_timeout="5s") as broker:
        answer, _ = await trickle(
            broker.proxy_url,
            post_head("/payments/v1/charges", "slow-ok"),
            [BODY[:10], BODY[10:]],
        )
    assert answer.startswith(b"HTTP/1.1 201"), answer


async def test_trickling_clients_cannot_hold_every_connection_past_the_deadline(
    database_url: str, tmp_path: Path
) -> None:
    async with running_broker(
        database_url, tmp_path, body_timeout=f"{DEADLINE_MS}ms", max_connections=2
    ) as broker:
        connected = [asyncio.Event(), asyncio.Event()]
        trickles = [
            asyncio.create_task(
                trickle(
                    broker.proxy_url,
                    post_head("/payments/v1/charges", f"slow-{n}", chunked=True),
                    chunked(BODY) * 100,
                    connected[n],
                )
            )
            for n in range(2)
        ]
        for event in connected:  # the kernel hands them over before any probe
            await event.wait()
        started = time.monotonic()

        async def probe() -> int:
            """The status of a request that needs a connection of its own."""
            return (await request("GET", f"{broker.proxy_url}/probe")).status

        # Both places taken by trickling bodies: everyone else is turned away...
        while await probe() != 503:
            assert time.monotonic() - started < DEADLINE / 2, "no lockout to lift"
            await asyncio.sleep(0.01)
        # ...until the deadline cuts them off and frees the places.
        while (status := await probe()) == 503:
            assert time.monotonic() - started < 5 * DEADLINE, "still locked out"
            await asyncio.sleep(0.05)
        assert status == 404  # admitted: a reverse-mode path no route matches
        for task in trickles:
            answer, answered = await task
            assert_408_and_closed(answer, answered)
