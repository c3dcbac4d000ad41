"""WebSocket upgrades relayed to the origin, unrecorded, in both directions.

Every way a client reaches a WebSocket through the proxy: aiohttp's absolute-form
``GET ws://host/path`` (forward mode), the ``websockets`` package's ``CONNECT`` tunnel
to a watched host carrying plain ``ws://`` (served as HTTP inside the tunnel) or, with
the proxy's CA, ``wss://`` (intercepted). Each echoes text and binary both ways and
ends when either side closes; nothing is recorded. An origin that declines the upgrade
is answered as it answered, and ``h2c`` is served as plain HTTP/1.1, never relayed.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import WSMsgType, web

from tests.integration.harness import (
    Broker,
    address,
    ledger_rows,
    running_broker,
    serve_app,
)
from tests.integration.tls_support import TlsWorld, serve_tls

websockets = pytest.importorskip("websockets")
from websockets.asyncio.client import connect as ws_connect  # noqa: E402


@dataclass
class EchoServer:
    """Echoes each message; ``bye`` makes it close first. Records the handshakes."""

    handshakes: list[dict[str, str]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.handshakes.append(dict(request.headers))
        if request.path == "/declined":
            return web.json_response({"error": "no websockets here"}, status=403)
        if request.headers.get("Upgrade", "").lower() != "websocket":
            return web.json_response({"upgrade": request.headers.get("Upgrade")})
        socket = web.WebSocketResponse(protocols=("chat",), max_msg_size=0)
        await socket.prepare(request)
        async for message in socket:
            if message.type is WSMsgType.TEXT and message.data == "bye":
                await socket.close(code=4001, message=b"server says bye")
            elif message.type is WSMsgType.TEXT:
                await socket.send_str(f"echo:{message.data}")
            elif message.type is WSMsgType.BINARY:
                await socket.send_bytes(message.data[::-1])
        return socket


def routes(port: int, tls_port: int) -> str:
    return f"""\
version: 1
contracts:
  - name: payments.charge
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 1h
    timeout: 5s
routes:
  - name: plain-watched
    match: {{method: POST, host: "127.0.0.1:{port}", path: /v1/charges}}
    contract: payments.charge
  - name: tls-watched
    match: {{method: POST, host: "127.0.0.1:{tls_port}", path: /v1/charges}}
    contract: payments.charge
  - name: sockets
    match: {{method: POST, path: /sockets/v1/charges}}
    strip_prefix: /sockets
    upstream: http://127.0.0.1:{port}
    contract: payments.charge
  - name: closed
    match: {{method: POST, path: /closed/v1/charges}}
    strip_prefix: /closed
    upstream: http://127.0.0.1:{port}
    contract: payments.charge
    passthrough: false
"""


@dataclass
class Setup:
    broker: Broker
    echo: EchoServer
    port: int
    tls_port: int
    world: TlsWorld


@asynccontextmanager
async def setup(database_url: str, tmp_path: Path) -> AsyncIterator[Setup]:
    world = TlsWorld(tmp_path)
    echo = EchoServer()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", echo.handle)
    async with (
        serve_app(app) as url,
        serve_tls(echo.handle, world.server_context()) as tls_port,
    ):
        port = address(url)[1]
        async with running_broker(
            database_url,
            tmp_path,
            routes=lambda _: routes(port, tls_port),
            **world.settings(),
        ) as broker:
            yield Setup(broker, echo, port, tls_port, world)


async def test_aiohttp_absolute_form_websocket_is_relayed_both_ways(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path) as s, aiohttp.ClientSession() as session:
        async with session.ws_connect(
            f"ws://127.0.0.1:{s.port}/chat",
            proxy=s.broker.proxy_url,
            protocols=("chat",),
        ) as socket:
            assert socket.protocol == "chat"
            await socket.send_str("hello")
            assert (await socket.receive_str()) == "echo:hello"
            await socket.send_bytes(b"\x00\x01\x02")
            assert (await socket.receive_bytes()) == b"\x02\x01\x00"
            await socket.send_str("bye")
            closing = await socket.receive()
            assert closing.type is WSMsgType.CLOSE and closing.data == 4001
        assert s.echo.handshakes[0]["Upgrade"].lower() == "websocket"
        assert await ledger_rows(database_url) == []


async def test_websockets_through_a_plain_tunnel_to_a_watched_host(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path) as s:
        async with ws_connect(
            f"ws://127.0.0.1:{s.port}/chat", proxy=s.broker.proxy_url
        ) as socket:
            await socket.send("one")
            assert await asyncio.wait_for(socket.recv(), 5) == "echo:one"
            await socket.send(b"ab")
            assert await asyncio.wait_for(socket.recv(), 5) == b"ba"
        assert len(s.echo.handshakes) == 1
        assert await ledger_rows(database_url) == []


async def test_websockets_wss_through_an_intercepted_tunnel(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path) as s:
        trust = ssl.create_default_context(cafile=str(s.world.ca_cert))
        async with ws_connect(
            f"wss://127.0.0.1:{s.tls_port}/chat", proxy=s.broker.proxy_url, ssl=trust
        ) as socket:
            await socket.send("secure")
            assert await asyncio.wait_for(socket.recv(), 5) == "echo:secure"
            await socket.send("bye")
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(socket.recv(), 5)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 4001
        assert len(s.echo.handshakes) == 1


async def test_a_client_closing_ends_the_relay_and_the_proxy_keeps_serving(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path) as s, aiohttp.ClientSession() as session:
        for round_ in range(2):
            async with session.ws_connect(
                f"ws://127.0.0.1:{s.port}/chat", proxy=s.broker.proxy_url
            ) as socket:
                await socket.send_str(f"round {round_}")
                assert (await socket.receive_str()) == f"echo:round {round_}"
        assert len(s.echo.handshakes) == 2


async def test_a_declined_upgrade_is_answered_as_the_origin_answered(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path) as s, aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.WSServerHandshakeError) as declined:
            await session.ws_connect(
                f"ws://127.0.0.1:{s.port}/declined", proxy=s.broker.proxy_url
            )
        assert declined.value.status == 403


async def test_h2c_is_served_as_http_1_1_not_relayed(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path) as s:
        reader, writer = await asyncio.open_connection(*address(s.broker.proxy_url))
        writer.write(
            f"GET http://127.0.0.1:{s.port}/plain HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{s.port}\r\nConnection: Upgrade, HTTP2-Settings\r\n"
            "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n".encode()
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        writer.close()
        assert head.startswith(b"HTTP/1.1 200"), head
        assert b"Upgrade" not in head
        assert "Upgrade" not in s.echo.handshakes[0]


async def test_http2_prior_knowledge_gets_a_goaway_saying_http_1_1_required(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path) as s:
        reader, writer = await asyncio.open_connection(*address(s.broker.proxy_url))
        writer.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        settings, goaway = answer[:9], answer[9:]
        assert settings == b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
        assert goaway[3] == 0x7  # GOAWAY
        assert int.from_bytes(goaway[13:17], "big") == 0xD  # HTTP_1_1_REQUIRED
        assert b"HTTP/1.1" in goaway[17:]
        # A request that only starts like the preface is still HTTP/1.1.
        reader, writer = await asyncio.open_connection(*address(s.broker.proxy_url))
        writer.write(
            f"PRI http://127.0.0.1:{s.port}/x HTTP/1.1\r\nHost: h\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        answer = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        assert answer.startswith(b"HTTP/1."), answer  # an HTTP/1 answer, not frames


async def test_large_messages_cross_the_relay_intact_both_ways(
    database_url: str, tmp_path: Path
) -> None:
    """Megabytes each way, past the relay's high-water mark: flow control pauses and
    resumes each side, and no byte is lost or reordered."""
    payload = bytes(range(256)) * (16 * 1024)  # 4 MiB, 8 times: 32 MiB each way
    async with (
        setup(database_url, tmp_path) as s,
        aiohttp.ClientSession() as session,
        session.ws_connect(
            f"ws://127.0.0.1:{s.port}/chat", proxy=s.broker.proxy_url, max_msg_size=0
        ) as socket,
    ):
        for _ in range(8):
            await socket.send_bytes(payload)
        for _ in range(8):
            echoed = await asyncio.wait_for(socket.receive_bytes(), 30)
            assert echoed == payload[::-1]


async def test_reverse_mode_relays_under_a_prefix_unless_the_route_refuses(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path) as s, aiohttp.ClientSession() as session:
        async with session.ws_connect(f"{s.broker.proxy_url}/sockets/chat") as socket:
            await socket.send_str("reverse")
            assert (await socket.receive_str()) == "echo:reverse"
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await session.ws_connect(f"{s.broker.proxy_url}/closed/chat")
        assert refused.value.status == 404
        assert len(s.echo.handshakes) == 1


async def test_an_upgrade_offer_on_a_request_with_a_body_is_served_as_http(
    database_url: str, tmp_path: Path
) -> None:
    """Never a WebSocket handshake: relaying it would drop its body."""
    async with setup(database_url, tmp_path) as s:
        reader, writer = await asyncio.open_connection(*address(s.broker.proxy_url))
        writer.write(
            f"POST http://127.0.0.1:{s.port}/plain HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{s.port}\r\nConnection: Upgrade\r\n"
            "Upgrade: websocket\r\nContent-Length: 5\r\n\r\nhello".encode()
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        writer.close()
        assert head.startswith(b"HTTP/1.1 200"), head
        [seen] = s.echo.handshakes
        assert "Upgrade" not in seen and seen["Content-Length"] == "5"
