"""A CONNECT tunnel to a watched host that carries plain HTTP, not TLS.

Node's proxy agent (undici's ``EnvHttpProxyAgent``) tunnels ``http://`` URLs too, with
``CONNECT host:80``. The proxy looks at the tunnel's first byte: a TLS handshake is
intercepted as before, anything else is served as HTTP/1.1 on ``http://<authority>``
through the same flow, recorded once and replayed. Raw sockets here; Node itself is in
``test_https_clients``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.integration.harness import ledger_rows
from tests.integration.intercept_support import setup
from tests.integration.tls_support import charge_request, connect_raw, split


async def post_in_plain_tunnel(
    proxy: tuple[str, int], key: str, authority: str = "api.test:80"
) -> bytes:
    reader, writer, head = await connect_raw(proxy, authority)
    try:
        assert head.startswith(b"HTTP/1.1 200"), head
        writer.write(charge_request(key))
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


async def test_plain_http_in_a_tunnel_is_recorded_once_and_replayed(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path) as s:
        first = split(await post_in_plain_tunnel(s.proxy, "plain-1"))
        retry = split(await post_in_plain_tunnel(s.proxy, "plain-1"))
        assert first[0] == 200, first
        assert first[1]["effect-status"] == "succeeded"
        assert retry[0] == 200, retry
        assert retry[1]["idempotent-replayed"] == "true"
        assert retry[1]["effect-id"] == first[1]["effect-id"]
        assert retry[2] == first[2]
        assert len(s.target.posts()) == 1
        rows = await ledger_rows(database_url)
        assert [(r["operation_key"], r["status"]) for r in rows] == [
            ("plain-1", "succeeded")
        ]


async def test_plain_http_is_served_on_port_443_too(
    database_url: str, tmp_path: Path
) -> None:
    """The first byte decides, not the port the client asked for."""
    async with setup(database_url, tmp_path) as s:
        status, headers, _ = split(
            await post_in_plain_tunnel(s.proxy, "plain-443", "api.test:443")
        )
        assert status == 200 and headers["effect-status"] == "succeeded"
        assert len(s.target.posts()) == 1


async def test_a_plain_tunnel_refuses_a_target_naming_another_origin(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path) as s:
        reader, writer, head = await connect_raw(s.proxy, "api.test:80")
        assert head.startswith(b"HTTP/1.1 200"), head
        # The https:// origin of the same host is another origin than this tunnel's.
        raw = charge_request("elsewhere").replace(
            b"POST /v1/charges", b"POST https://api.test/v1/charges", 1
        )
        writer.write(raw)
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        status, _, body = split(answer)
        assert status == 421, answer
        assert json.loads(body)["type"].endswith("/misdirected-request")
        assert s.target.posts() == []


async def test_without_a_ca_plain_http_in_a_tunnel_is_still_served(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path, ca_cert=None, ca_key=None) as s:
        first = split(await post_in_plain_tunnel(s.proxy, "no-ca-1"))
        retry = split(await post_in_plain_tunnel(s.proxy, "no-ca-1"))
        assert first[0] == 200, first
        assert retry[1]["idempotent-replayed"] == "true"
        assert len(s.target.posts()) == 1


async def test_without_a_ca_tls_in_a_tunnel_is_closed_not_blind_tunnelled(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path, ca_cert=None, ca_key=None) as s:
        reader, writer, head = await connect_raw(s.proxy, "api.test:80")
        assert head.startswith(b"HTTP/1.1 200"), head
        writer.write(b"\x16\x03\x01\x00\x05hello")
        await writer.drain()
        # Closed with the hello unread: an EOF or a reset, never bytes from anywhere.
        try:
            rest = await asyncio.wait_for(reader.read(), 5)
        except ConnectionResetError:
            rest = b""
        writer.close()
        assert rest == b""
        assert s.target.seen == []


async def test_a_silent_tunnel_is_closed_after_the_header_timeout(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path, header_timeout="1s") as s:
        reader, writer, head = await connect_raw(s.proxy, "api.test:80")
        assert head.startswith(b"HTTP/1.1 200"), head
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
