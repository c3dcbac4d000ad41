"""CONNECT: tunnelled where policy allows, refused where the ledger would be blind."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from aiohttp import web

from tests.integration.harness import (
    PROBLEMS,
    ROUTES,
    Broker,
    address,
    ledger_rows,
    running_broker,
    serve_handler,
)


async def hello(request: web.Request) -> web.Response:
    return web.Response(text=f"hello from {request.path}")


async def connect(
    broker: Broker, authority: str
) -> tuple[bytes, asyncio.StreamReader, asyncio.StreamWriter]:
    """Send CONNECT and read the proxy's answer head."""
    host, port = address(broker.proxy_url)
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    return head, reader, writer


async def test_an_unguarded_host_is_tunnelled_and_nothing_is_recorded(
    broker: Broker, database_url: str
) -> None:
    async with serve_handler(hello) as upstream:
        head, reader, writer = await connect(broker, upstream.removeprefix("http://"))
        try:
            assert head.startswith(b"HTTP/1.1 200")
            writer.write(b"GET /inside HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = await asyncio.wait_for(reader.read(), 10)
        finally:
            writer.close()

    assert answer.startswith(b"HTTP/1.1 200")
    assert answer.endswith(b"hello from /inside")
    assert await ledger_rows(database_url) == []


async def test_a_refuse_policy_refuses_every_tunnel(
    database_url: str, tmp_path: Path
) -> None:
    def routes(target: str) -> str:
        text = ROUTES.format(
            target=target,
            timeout="2s",
            key_retention="1h",
            settlement_bound="300ms",
            unmatched="pass",
        )
        return text.replace(
            "  unmatched: pass\n", "  unmatched: pass\n  connect: refuse\n"
        )

    async with (
        running_broker(database_url, tmp_path, routes=routes) as broker,
        serve_handler(hello) as upstream,
    ):
        head, reader, writer = await connect(broker, upstream.removeprefix("http://"))
        try:
            body = await asyncio.wait_for(reader.read(), 10)
        finally:
            writer.close()

    assert head.startswith(b"HTTP/1.1 403")
    problem = json.loads(body)
    assert problem["type"] == PROBLEMS + "route-refused"
    assert "proxy.connect is refuse" in problem["detail"]


async def test_an_unreachable_tunnel_target_is_a_502_problem(broker: Broker) -> None:
    head, reader, writer = await connect(broker, "127.0.0.1:1")
    try:
        body = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()

    assert head.startswith(b"HTTP/1.1 502")
    problem = json.loads(body)
    assert problem["type"] == PROBLEMS + "upstream-unreachable"
    assert "could not reach 127.0.0.1:1" in problem["detail"]


async def test_plain_requests_still_reach_aiohttp_after_the_first_bytes(
    broker: Broker,
) -> None:
    """A request whose first bytes look like the start of CONNECT is not swallowed."""
    host, port = address(broker.proxy_url)
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(b"CON")  # a prefix of CONNECT, then something else entirely
        await writer.drain()
        writer.write(b"\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    # aiohttp's own parser answered: the bytes were handed over, not held back.
    assert b" 400 Bad Request" in answer
    assert b"application/problem+json" in answer
    assert b"BadHttpMethod" in answer


async def test_a_host_that_cannot_be_idna_encoded_is_a_400_not_a_hang(
    broker: Broker, database_url: str
) -> None:
    """Such a name once raised UnicodeError in the tunnel's resolver call, which no
    handler caught: the client waited forever on an open connection."""
    for host in (b"a" + b"\xe9" * 64 + b".test", b"\xe9..test", b"\xff" * 70):
        head, reader, writer = await connect_bytes(broker, host + b":443")
        try:
            body = await asyncio.wait_for(reader.read(), 10)
        finally:
            writer.close()
        assert head.startswith(b"HTTP/1.1 400"), (host, head)
        problem = json.loads(body)
        assert problem["type"] == PROBLEMS + "malformed-request"
        assert "host name" in problem["detail"]
    assert await ledger_rows(database_url) == []


async def connect_bytes(
    broker: Broker, authority: bytes
) -> tuple[bytes, asyncio.StreamReader, asyncio.StreamWriter]:
    """``connect`` for an authority no text encoding gives (raw bytes)."""
    reader, writer = await asyncio.open_connection(*address(broker.proxy_url))
    writer.write(b"CONNECT " + authority + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    return head, reader, writer


async def test_a_pass_through_host_that_cannot_be_idna_encoded_is_a_4xx(
    broker: Broker,
) -> None:
    for host in (b"a" + b"\xc3\xa9" * 64 + b".test", b"a..test", b"x" * 70 + b".test"):
        reader, writer = await asyncio.open_connection(*address(broker.proxy_url))
        try:
            writer.write(
                b"GET http://" + host + b"/x HTTP/1.1\r\nHost: " + host + b"\r\n"
                b"Connection: close\r\n\r\n"
            )
            answer = await asyncio.wait_for(reader.read(), 10)
        finally:
            writer.close()
        status = int(answer.split(b" ", 2)[1])
        assert 400 <= status < 500, (host, answer)
        assert b"application/problem+json" in answer
