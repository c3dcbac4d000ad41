"""Protocol upgrades (WebSocket) relayed to the origin, unrecorded, both ways.

A WebSocket opens with ``GET`` + ``Upgrade: websocket``; after the ``101`` the
connection carries frames, not requests, so there is nothing for the ledger to read and
nothing for a route to match. Left to the request flow the handshake reached the origin
without its ``Upgrade`` (``Upgrade`` is hop-by-hop, so pass-through drops it), and an
absolute-form ``GET ws://host/ws`` was taken for a reverse-mode path. Here the
handshake goes to the origin with its ``Connection``/``Upgrade`` headers through the
pass-through client (so the egress policy and upstream TLS verification hold), and on
a ``101`` the proxy writes the origin's answer to the client and then relays raw bytes
both ways until either side closes. An origin that declines (any other status) is
answered as the client would see it without a proxy.

``h2c`` is never relayed: HTTP/2 over cleartext would hide every request after it.
Such a request is served as the HTTP/1.1 request it also is (RFC 9113 3.2 lets a
server ignore the offer), through the ordinary flow.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.base_protocol import BaseProtocol
from yarl import URL

from effect_broker.engine import TLS_REFUSED, tls_failure
from effect_broker.errors import UpstreamTLS, UpstreamUnreachable
from effect_broker.headers import HOP_BY_HOP, response_headers
from effect_broker.problems import problem_response
from effect_broker.proxy.egress import EgressGuard

log = logging.getLogger("effect_broker.upgrade")

#: Unsent bytes towards one side beyond which the other side is read no more.
HIGH_WATER = 1024 * 1024
#: Upgrade tokens never relayed (served as plain HTTP/1.1 instead).
NOT_RELAYED = frozenset({"h2c"})
#: Schemes of an absolute-form WebSocket target, and the HTTP scheme each means.
WS_SCHEMES = {"ws": "http", "wss": "https"}


def upgrade_offer(request: web.BaseRequest) -> str | None:
    """The protocol a request asks to upgrade to (lower case), or None.

    Only a ``Connection`` that names ``upgrade`` makes an ``Upgrade`` header an offer
    (RFC 9110 7.8).
    """
    offer = request.headers.get("Upgrade")
    if not offer:  # almost every request: no need to read Connection at all
        return None
    tokens = {
        token.strip().lower()
        for value in request.headers.getall("Connection", [])
        for token in value.split(",")
    }
    if "upgrade" not in tokens:
        return None
    return offer.split(",")[0].strip().lower() or None


def relays(offer: str | None) -> bool:
    """Whether an upgrade to ``offer`` is relayed (a WebSocket, say), not ignored."""
    return offer is not None and offer.split("/")[0] not in NOT_RELAYED


def http_url(target: URL) -> URL:
    """``ws://``/``wss://`` as the ``http://``/``https://`` URL the handshake uses."""
    scheme = WS_SCHEMES.get(target.scheme)
    return target.with_scheme(scheme) if scheme is not None else target


def handshake_headers(request: web.BaseRequest) -> list[tuple[str, str]]:
    """The client's headers for the origin: hop-by-hop ones dropped (``Host`` and the
    proxy's own too), the upgrade offer itself kept."""
    kept = [
        (name, value)
        for name, value in request.headers.items()
        if name.lower() not in HOP_BY_HOP | {"host", "content-length"}
    ]
    return [*kept, ("Connection", "Upgrade"), ("Upgrade", request.headers["Upgrade"])]


class _Forward:
    """Stands in for a protocol's payload parser: each byte one side receives is
    written, unchanged, to the other side's transport; its end ends the relay.

    A slow reader on the far side must not make the proxy buffer without bound: past
    ``HIGH_WATER`` unsent bytes, reading from this side pauses until the far side's
    protocol has drained (aiohttp's own flow control tells when).
    """

    def __init__(
        self,
        to: asyncio.BaseTransport,
        to_protocol: BaseProtocol,
        source: asyncio.BaseTransport,
        ended: asyncio.Event,
    ) -> None:
        self._to: Any = to
        self._to_protocol = to_protocol
        self._source: Any = source
        self._ended = ended
        self._draining: asyncio.Future[None] | None = None

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        if data and not self._to.is_closing():
            self._to.write(data)
            if self._to.get_write_buffer_size() > HIGH_WATER and self._draining is None:
                self._source.pause_reading()
                self._draining = asyncio.ensure_future(self._resume_when_drained())
        return False, b""

    async def _resume_when_drained(self) -> None:
        try:
            await self._to_protocol._drain_helper()
        except ConnectionError:
            self._ended.set()
            return
        finally:
            self._draining = None
        if not self._source.is_closing():
            self._source.resume_reading()

    def feed_eof(self) -> None:
        self._ended.set()

    def set_exception(self, exc: BaseException, cause: object = None) -> None:
        self._ended.set()


async def relay_upgrade(
    request: web.Request,
    session: aiohttp.ClientSession,
    egress: EgressGuard,
    url: URL,
) -> web.StreamResponse:
    """Send the handshake to ``url``; on ``101`` relay bytes until either side ends."""
    egress.check(url.host or "", url.port or 80)
    try:
        upstream = await session.request(
            request.method,
            url,
            headers=handshake_headers(request),
            data=None,
            allow_redirects=False,
            read_until_eof=False,
        )
    except TLS_REFUSED as exc:
        return problem_response(
            UpstreamTLS(f"{tls_failure(url.host, exc)}; nothing was forwarded")
        )
    except (aiohttp.ClientError, OSError) as exc:
        return problem_response(
            UpstreamUnreachable(
                f"the upgrade to {url.host} failed before an answer "
                f"({type(exc).__name__}: {exc}); nothing is relayed"
            ),
            status=502,
        )
    if upstream.status != 101:
        try:
            body = await upstream.read()
        finally:
            upstream.release()
        declined = web.Response(status=upstream.status, reason=upstream.reason, body=body)
        for name, value in response_headers(upstream.headers.items()):
            declined.headers.add(name, value)
        return declined
    return await _relay(request, upstream)


async def _relay(
    request: web.Request, upstream: aiohttp.ClientResponse
) -> web.StreamResponse:
    connection = upstream.connection
    assert connection is not None and connection.protocol is not None
    upstream_transport = connection.transport
    client_transport = request.transport
    assert upstream_transport is not None and client_transport is not None
    switched = web.StreamResponse(status=101, reason=upstream.reason or None)
    for name, value in upstream.raw_headers:
        switched.headers.add(name.decode("latin-1"), value.decode("latin-1"))
    request.protocol.keep_alive(False)
    await switched.prepare(request)
    ended = asyncio.Event()
    protocol = connection.protocol
    protocol.read_timeout = None  # a quiet WebSocket is not a stalled answer
    to_client = _Forward(client_transport, request.protocol, upstream_transport, ended)
    to_upstream = _Forward(upstream_transport, protocol, client_transport, ended)
    protocol.set_parser(to_client, to_client)
    request.protocol.set_parser(to_upstream)  # type: ignore[arg-type]
    try:
        await ended.wait()
    finally:
        upstream_transport.close()
        connection.close()
        client_transport.close()
    return switched
