"""HTTPS on loopback for interception tests.

``TlsWorld`` holds two authorities: the proxy's own CA (``ca.pem``/``ca.key``, what the
agent's container trusts) and a separate test CA (``trustme``) that signed the target's
certificate and that only the proxy trusts, through ``EFFECT_BROKER_UPSTREAM_CA_FILE``.
A client that sees a certificate issued by the target CA went through a blind tunnel;
one issued by the proxy's CA was intercepted.

``ChargeTarget`` is a tiny idempotent payment API over TLS: a charge per distinct
``Idempotency-Key`` (a repeated key gets the first answer back), every request recorded
with its headers, so a test can count effects and see what reached the target.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trustme
from aiohttp import web

from effect_broker.proxy.tls_ca import CertificateAuthority

TARGET_NAMES = ("api.test", "localhost", "127.0.0.1")


@dataclass
class TlsWorld:
    directory: Path
    target_ca: trustme.CA = field(default_factory=trustme.CA)

    def __post_init__(self) -> None:
        self.ca_cert = self.directory / "ca.pem"
        self.ca_key = self.directory / "ca.key"
        CertificateAuthority.create().save(self.ca_cert, self.ca_key)
        self.target_ca_file = self.directory / "target-ca.pem"
        self.target_ca.cert_pem.write_to_path(str(self.target_ca_file))
        # What a client trusts: the proxy's CA, and (to tell them apart) the target's.
        self.client_bundle = self.directory / "client-bundle.pem"
        self.client_bundle.write_bytes(
            self.ca_cert.read_bytes() + self.target_ca_file.read_bytes()
        )

    def settings(self) -> dict[str, Any]:
        """Broker settings: intercept with the local CA, trust the target's CA."""
        return {
            "ca_cert": self.ca_cert,
            "ca_key": self.ca_key,
            "upstream_ca_file": self.target_ca_file,
        }

    def server_context(self, *names: str) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.target_ca.issue_cert(*(names or TARGET_NAMES)).configure_cert(context)
        return context

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.client_bundle))


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class ChargeTarget:
    """An idempotent charges endpoint: one charge per Idempotency-Key."""

    seen: list[Seen] = field(default_factory=list)
    charges: dict[str, dict[str, Any]] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = {name.lower(): value for name, value in request.headers.items()}
        self.seen.append(Seen(request.method, request.path_qs, headers, body))
        if request.method != "POST":
            return web.json_response({"ok": True, "path": request.path})
        key = headers.get("idempotency-key", "")
        if key not in self.charges:
            self.charges[key] = {
                "id": f"ch_{next(self._ids)}",
                "object": "charge",
                "amount": _amount(request.content_type, body),
                "currency": "usd",
                "status": "succeeded",
            }
        return web.json_response(self.charges[key])

    def posts(self) -> list[Seen]:
        return [seen for seen in self.seen if seen.method == "POST"]


def _amount(content_type: str, body: bytes) -> int:
    if content_type == "application/json":
        return int(json.loads(body).get("amount", 0))
    for pair in body.decode().split("&"):
        name, _, value = pair.partition("=")
        if name == "amount":
            return int(value)
    return 0


@asynccontextmanager
async def serve_tls(
    handler: Any, context: ssl.SSLContext, host: str = "127.0.0.1"
) -> AsyncIterator[int]:
    """Serve ``handler`` for every path over TLS on loopback; yields the port."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, 0, ssl_context=context)
    await site.start()
    try:
        # asyncio.Server or uvloop's Server (not a subclass): both list their sockets.
        server = site._server
        assert server is not None
        yield int(server.sockets[0].getsockname()[1])
    finally:
        await runner.cleanup()


@dataclass
class Tunnel:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    @property
    def peer(self) -> ssl.SSLObject:
        found = self.writer.get_extra_info("ssl_object")
        assert isinstance(found, ssl.SSLObject)
        return found

    def issuer(self) -> dict[str, str]:
        """The issuer of the certificate this client was shown, by attribute name."""
        cert = self.peer.getpeercert()
        assert cert is not None
        return {name: str(value) for rdn in cert["issuer"] for name, value in rdn}

    async def exchange(self, raw: bytes) -> bytes:
        """Send one HTTP/1.1 request (Connection: close) and read the whole answer."""
        self.writer.write(raw)
        await self.writer.drain()
        return await self.reader.read()

    async def close(self) -> None:
        self.writer.close()
        with suppress(OSError, ssl.SSLError):
            await self.writer.wait_closed()


async def connect_raw(
    proxy: tuple[str, int], authority: str, *, headers: str = ""
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    """A CONNECT through the proxy; the reply head is returned, TLS not started."""
    reader, writer = await asyncio.open_connection(*proxy)
    writer.write(
        f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n{headers}\r\n".encode()
    )
    head = await reader.readuntil(b"\r\n\r\n")
    return reader, writer, head


async def open_tunnel(
    proxy: tuple[str, int],
    authority: str,
    context: ssl.SSLContext,
    *,
    server_hostname: str | None,
    headers: str = "",
) -> Tunnel:
    """CONNECT, expect 200, then TLS inside it as a client would."""
    reader, writer, head = await connect_raw(proxy, authority, headers=headers)
    assert head.startswith(b"HTTP/1.1 200"), head
    await writer.start_tls(context, server_hostname=server_hostname)
    return Tunnel(reader, writer)


CHARGE = b'{"amount": 1000, "currency": "usd"}'


# Every loopback spelling is one host to the proxy, so a setup that watches one of these
# watches them all; the blind-tunnel tests run without them.
LOOPBACK_ROUTES = """\
  - name: local-charge
    match: {{method: POST, host: "localhost:{port}", path: /v1/charges}}
    contract: payments.charge
  - name: by-address
    match: {{method: POST, host: "127.0.0.9", path: /v1/charges}}
    upstream: https://127.0.0.1:{port}
    contract: payments.charge
"""


def routes(port: int, *, watch_loopback: bool = True) -> str:
    loopback = LOOPBACK_ROUTES.format(port=port) if watch_loopback else ""
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
  - name: charge
    match: {{method: POST, host: "api.test", path: /v1/charges}}
    upstream: https://127.0.0.1:{port}
    contract: payments.charge
{loopback}  - name: untrusted
    match: {{method: POST, host: "untrusted.test", path: /v1/charges}}
    upstream: https://127.0.0.1:{{untrusted}}
    contract: payments.charge
"""


def charge_request(key: str, body: bytes = CHARGE, host: str = "api.test") -> bytes:
    return (
        f"POST /v1/charges HTTP/1.1\r\nHost: {host}\r\nOperation-Key: {key}\r\n"
        "Idempotency-Key: client-chosen\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


def split(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body
