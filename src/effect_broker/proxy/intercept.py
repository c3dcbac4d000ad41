"""TLS interception of a CONNECT tunnel to a host that a route watches.

With a CA configured, ``CONNECT api.stripe.com:443`` to a guarded host is answered
``200 Connection Established`` and the proxy, not the origin, completes the client's TLS
handshake: its leaf certificate for the CONNECT host, and only that host, is minted on
demand, signed by the local CA and cached per host (``leaves``). A client whose SNI
names another host (or a wildcard) gets no certificate: the handshake is refused. The
decrypted connection is then served by aiohttp like any other, by a request handler
that rewrites each request's target to ``https://<tunnel authority><path>``: from there
on it is an ordinary absolute-form request, so routing, the ledger, replay and
pass-through all run exactly as in forward mode, and upstream is always the tunnel's
authority, whatever ``Host`` the client wrote inside the tunnel. An absolute-form target
is accepted only on the tunnel's own origin; one naming any other is answered 421
``misdirected-request`` and goes nowhere (it would leave unrecorded otherwise).

A tunnel whose first byte does not open a TLS handshake carries plain HTTP/1.1 (Node's
undici tunnels ``http://`` URLs through ``CONNECT host:80``): it is served the same way
with ``http://<tunnel authority>`` as the origin (without a CA, on port 80 only; a
client that starts TLS there is closed, with the reason in the log).

In gateway mode the CONNECT itself must carry ``Proxy-Authorization``: the tenant it
names owns every effect inside the tunnel (the requests inside carry no proxy
credentials; HTTP clients send them on the CONNECT only).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.http_parser import RawRequestMessage
from yarl import URL

from effect_broker.answers import as_bytes, failure_answer
from effect_broker.config.hosts import canonical_host, split_authority
from effect_broker.errors import (
    EffectBrokerError,
    MalformedRequest,
    ProxyAuthenticationRequired,
    TooManyFailedCredentials,
)
from effect_broker.proxy.edge import ConnectionGate, EdgeRequestHandler
from effect_broker.proxy.leaves import LeafContexts
from effect_broker.proxy.sniff import looks_like_tls, peek_first_byte
from effect_broker.proxy.tls_ca import (
    host_name,
)
from effect_broker.ratelimited_log import RateLimitedLog
from effect_broker.tenancy import TenantResolver

log = logging.getLogger("effect_broker.intercept")
quiet = RateLimitedLog(log)

BASIC_REALM = 'Basic realm="effect-broker"'
PLAIN_HTTP_PORT = 80  # without a CA, only a tunnel to this port is served (plain HTTP)
NO_CA_HINT = (
    "; create a CA with `effect-broker ca init`, start with --ca-cert/--ca-key and "
    "have the client trust that CA, or send plain http:// to this proxy"
)
ESTABLISHED = b"HTTP/1.1 200 Connection Established\r\n\r\n"


@dataclass(frozen=True, slots=True)
class Tunnel:
    """Where the requests of an intercepted connection go, and on whose behalf."""

    authority: str  # host:port from the CONNECT line, IPv6 in brackets
    tenant: str | None  # the gateway tenant named on the CONNECT; None for a sidecar
    scheme: str = "https"  # "http" when the client spoke plain HTTP inside the tunnel

    @property
    def origin(self) -> str:
        return f"{self.scheme}://{self.authority}"

    @property
    def default_port(self) -> int:
        return 443 if self.scheme == "https" else 80

    def owns(self, target: str) -> bool:
        """Whether an absolute-form ``target`` names this tunnel's own origin: its
        scheme, the CONNECT host in any spelling, and its port (the scheme's default
        when none is written)."""
        scheme, sep, rest = target.partition("://")
        if not sep or scheme.lower() != self.scheme:
            return False
        try:
            host, port = split_authority(_authority_of(rest).rpartition("@")[2])
            tunnel_host, tunnel_port = split_authority(self.authority)
        except ValueError:
            return False
        same_host = canonical_host(host) == canonical_host(tunnel_host)
        default = self.default_port
        return same_host and (port or default) == (tunnel_port or default)


def _authority_of(rest: str) -> str:
    """The authority of an absolute-form target after its ``scheme://``."""
    ends = [rest.find(mark) for mark in "/?#" if mark in rest]
    return rest[: min(ends)] if ends else rest


def _path_of(rest: str) -> str:
    """The path and query of an absolute-form target after its ``scheme://``."""
    path = rest[len(_authority_of(rest)) :].partition("#")[0]
    return path if path.startswith("/") else "/" + path


class TunnelRequestHandler(EdgeRequestHandler):
    """aiohttp's handler for the decrypted side of an intercepted tunnel.

    Each request target is rewritten to absolute form on the tunnel's authority; the
    rest of the proxy then treats it as a forward-mode ``https://`` request.
    """

    def __init__(self, manager: web.Server, *, tunnel: Tunnel, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.tunnel = tunnel
        inner = self._request_factory
        assert inner is not None

        def factory(message: RawRequestMessage, *args: Any) -> web.BaseRequest:
            return inner(self._in_tunnel(message), *args)

        self._request_factory = factory

    def _in_tunnel(self, message: RawRequestMessage) -> RawRequestMessage:
        path = message.path
        if path.startswith("/"):
            target = f"{self.tunnel.origin}{path}"
        elif self.tunnel.owns(path):
            target = f"{self.tunnel.origin}{_path_of(path.partition('://')[2])}"
        else:
            # A target naming another origin (or none: ``*``) is left as written;
            # ``is_forward`` refuses it before anything is routed, sent or recorded.
            return message
        return message._replace(path=target, url=URL(target, encoded=True))


def tunnel_of(request: web.BaseRequest) -> Tunnel | None:
    """The intercepted tunnel a request came through, or None for a plain request."""
    protocol = request.protocol
    return protocol.tunnel if isinstance(protocol, TunnelRequestHandler) else None


class _Holding(asyncio.Protocol):
    """Keeps decrypted bytes that arrive before the request handler takes over."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.eof = False
        self.lost = False

    def data_received(self, data: bytes) -> None:
        self.buffer += data

    def eof_received(self) -> bool | None:
        self.eof = True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True


@dataclass(frozen=True, slots=True)
class Interception:
    """Everything the CONNECT front needs to intercept a tunnel to a guarded host."""

    leaves: LeafContexts | None  # None: no CA, so only plain HTTP tunnels are served
    http: web.Server
    keepalive_timeout: float
    handshake_timeout: float
    gateway: TenantResolver | None = None

    def serves(self, port: int) -> bool:
        """Whether a CONNECT to a watched host on ``port`` is answered 200 and served.

        With a CA every port is (TLS is intercepted, plain HTTP served). Without one
        only plain HTTP can be served, so only port 80, where a client tunnels an
        ``http://`` URL; on any other port the CONNECT is refused up front, where the
        refusal can still say why (a TLS client would only see the tunnel close).
        """
        return self.leaves is not None or port == PLAIN_HTTP_PORT

    async def run(
        self,
        transport: asyncio.Transport,
        host: str,
        port: int,
        head: bytes,
        rest: bytes,
        gate: ConnectionGate | None,
    ) -> None:
        """Serve one intercepted tunnel; ``gate`` is released when it ends."""
        handed_over = False
        try:
            handed_over = await self._run(transport, host, port, head, rest, gate)
        finally:
            if not handed_over:
                if gate is not None:
                    gate.release()
                transport.close()

    async def _run(
        self,
        transport: asyncio.Transport,
        host: str,
        port: int,
        head: bytes,
        rest: bytes,
        gate: ConnectionGate | None,
    ) -> bool:
        tenant = None
        if self.gateway is not None:
            try:
                tenant = await self.gateway.tenant_for(
                    proxy_authorization(head), peer_address(transport)
                )
            except (ProxyAuthenticationRequired, TooManyFailedCredentials) as exc:
                _refuse(transport, exc)  # with its challenge, or its Retry-After
                return False
        if rest:
            _refuse(
                transport,
                MalformedRequest(
                    "bytes followed the CONNECT head before the 200: wait for "
                    "'200 Connection Established', then start TLS"
                ),
            )
            return False
        leaf_host = host_name(host)
        if leaf_host is None:
            _refuse(transport, MalformedRequest(f"{host!r} is not a host name"))
            return False
        transport.write(ESTABLISHED)
        try:
            first = await peek_first_byte(transport, timeout=self.handshake_timeout)
        except (OSError, TimeoutError):
            return False
        if not first:
            return False
        loop = asyncio.get_running_loop()
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if not looks_like_tls(first):
            # Plain HTTP inside the tunnel (undici tunnels http:// too): served as
            # http:// requests to the tunnel's authority, through the same flow.
            plain = self._handler(Tunnel(authority, tenant, "http"), gate, loop)
            transport.set_protocol(plain)
            plain.connection_made(transport)
            transport.resume_reading()
            return True
        if self.leaves is None:
            quiet.warning(
                f"no-ca:{host}",
                "CONNECT %s: the client started TLS to a host that routes watch, and "
                "this proxy has no CA to intercept it, so the tunnel is closed%s",
                authority,
                NO_CA_HINT,
            )
            return False
        context = self.leaves.for_host(leaf_host)
        holding = _Holding()
        try:
            secure = await loop.start_tls(
                transport,
                holding,
                context,
                server_side=True,
                ssl_handshake_timeout=self.handshake_timeout,
            )
        except (OSError, TimeoutError, ConnectionError, ssl.SSLError) as exc:
            # A client that pins the origin's certificate ends up here, every time.
            quiet.warning(
                "handshake",
                "TLS handshake for an intercepted tunnel to %s failed: %s (%s); a "
                "client that does not trust the proxy's CA, or pins certificates, "
                "cannot be intercepted",
                host,
                type(exc).__name__,
                getattr(exc, "reason", None) or "no reason given",
            )
            return False
        if secure is None or holding.lost:
            return False
        handler = self._handler(Tunnel(authority, tenant), gate, loop)
        secure.set_protocol(handler)
        handler.connection_made(secure)
        if holding.buffer:
            handler.data_received(bytes(holding.buffer))
        if holding.eof:
            handler.eof_received()
        return True

    def _handler(
        self,
        tunnel: Tunnel,
        gate: ConnectionGate | None,
        loop: asyncio.AbstractEventLoop,
    ) -> TunnelRequestHandler:
        return TunnelRequestHandler(
            self.http,
            tunnel=tunnel,
            gate=gate,
            loop=loop,
            access_log=None,
            keepalive_timeout=self.keepalive_timeout,
        )


def peer_address(transport: asyncio.BaseTransport) -> str | None:
    """The client's IP address, as aiohttp's ``request.remote`` gives it."""
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else None


def proxy_authorization(head: bytes) -> str | None:
    """The ``Proxy-Authorization`` value of a CONNECT head, if it has one."""
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep and name.strip().lower() == b"proxy-authorization":
            return value.strip().decode("latin-1")
    return None


def _refuse(transport: asyncio.Transport, error: EffectBrokerError) -> None:
    """``error`` as the shared mapping answers it (``answers.failure_answer``)."""
    answer = failure_answer(error)
    assert answer is not None  # an EffectBrokerError is always a failure
    transport.write(as_bytes(answer))
