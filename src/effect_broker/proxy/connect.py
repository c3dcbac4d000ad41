"""CONNECT, answered before aiohttp sees the connection.

A CONNECT tunnel carries opaque (usually TLS) bytes: the ledger cannot see a method, a
path or a body inside it. So a host that any route watches is always refused, with an
explanation; for every other host ``proxy.connect`` decides: ``tunnel`` pipes bytes both
ways, ``refuse`` answers 403; and a tunnel goes only where the egress policy allows
(``proxy.egress``: the host as written, then each address it resolves to). With a local
CA configured, a CONNECT to a watched host is handed to ``intercept`` instead, which
reads the requests inside; without one, a CONNECT to a watched host on port 80 is
handed over too, and served only if it carries plain HTTP (Node's proxy agent tunnels
``http://`` that way). aiohttp's server cannot hand a connection over
to a raw pipe, so each new connection first meets ``FrontProtocol``: it looks at the
first bytes, and anything that is not CONNECT is handed to aiohttp's own protocol
unchanged.

The front is also where a connection is first seen, so it enforces the connection cap
(a 503 on the raw transport beyond it) and the wait for a first byte: a client that
connects and says nothing is closed after ``header_timeout`` with a 408.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from effect_broker.answers import as_bytes, failure_answer
from effect_broker.config.hosts import host_key, lookup_refusal
from effect_broker.errors import (
    EffectBrokerError,
    EgressRefused,
    MalformedRequest,
    RequestTimeout,
    RouteRefused,
    TooManyConnections,
    UpstreamUnreachable,
)
from effect_broker.proxy import h2_refusal
from effect_broker.proxy.edge import ConnectionGate
from effect_broker.proxy.edge_input import printable
from effect_broker.proxy.egress import EgressGuard
from effect_broker.proxy.h2_refusal import PREFACE, may_be_preface
from effect_broker.proxy.intercept import Interception
from effect_broker.ratelimited_log import RateLimitedLog

log = logging.getLogger("effect_broker.connect")
# An SDK reports a refused tunnel as "Tunnel connection failed" and nothing more: the
# reason must be in the proxy's log, once per reason (per watched host) an hour.
refusals = RateLimitedLog(log, interval=3600.0)

CONNECT = b"CONNECT "
MAX_HEAD = 16 * 1024
CONNECT_TIMEOUT = 10.0
HIGH_WATER = 1024 * 1024
INTERCEPT_HINT = (
    "; or let the proxy intercept it: create a CA with `effect-broker ca init`, start "
    "with --ca-cert/--ca-key and have the client trust that CA"
)


@dataclass(frozen=True, slots=True)
class ConnectPolicy:
    """Which CONNECT targets may be tunnelled; hosts with routes never are."""

    is_guarded: Callable[[str], bool]
    tunnel: bool
    gateway: bool = False
    egress: EgressGuard | None = None  # None: no egress policy (tests of the front only)

    def refusal(self, authority: str) -> str | None:
        """Why this CONNECT is refused, or None when it may be tunnelled."""
        if self.is_guarded(authority):
            return (
                f"{authority} has routes that record effects, and a CONNECT tunnel would "
                "hide them from the ledger. Send plain http:// to this proxy (it "
                "forwards to the route's https:// upstream) instead of tunnelling"
            )
        if self.gateway:
            return "a shared gateway does not tunnel: a tunnel cannot be tied to a tenant"
        if not self.tunnel:
            return f"proxy.connect is refuse: this proxy does not tunnel to {authority}"
        return None

    async def open(
        self, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The upstream socket, to an address the egress policy checked at connect
        time (``EgressRefused`` otherwise): a DNS answer cannot rebind past the check."""
        if self.egress is None:
            return await asyncio.open_connection(host, port)
        return await self.egress.open_connection(host, port)


def parse_authority(head: bytes) -> tuple[str, int] | None:
    """host and port of ``CONNECT host:port HTTP/1.1``, else None."""
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return None
    host, sep, port = parts[1].rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host.strip("[]"), int(port)


STREAM_METHODS = (
    "write",
    "close",
    "is_closing",
    "pause_reading",
    "resume_reading",
    "set_protocol",
    "get_extra_info",
)


def stream_transport(transport: asyncio.BaseTransport) -> asyncio.Transport:
    """``transport`` as the read-write stream transport it is (asyncio's or uvloop's).

    Checked by the methods the front and the interception call, not by class: a
    transport without them is a programming error and fails here, at the connection's
    first callback, rather than deep inside a tunnel.
    """
    missing = [name for name in STREAM_METHODS if not hasattr(transport, name)]
    if missing:
        raise TypeError(
            f"{type(transport).__name__} is not a stream transport (lacks "
            f"{', '.join(missing)})"
        )
    return cast(asyncio.Transport, transport)


class FrontProtocol(asyncio.Protocol):
    """Sees the first bytes of a connection: CONNECT is ours, the rest is aiohttp's."""

    def __init__(
        self,
        http_factory: Callable[[], asyncio.Protocol],
        policy: ConnectPolicy,
        *,
        gate: ConnectionGate | None = None,
        header_timeout: float | None = None,
        intercept: Interception | None = None,
    ) -> None:
        self._http_factory = http_factory
        self._intercept = intercept  # set when a CA lets guarded hosts be intercepted
        self._policy = policy
        self._gate = gate  # set while this protocol owns a counted connection
        self._header_timeout = header_timeout
        self._head_timer: asyncio.TimerHandle | None = None
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._upstream: asyncio.StreamWriter | None = None
        self._pump: asyncio.Task[None] | None = None
        self._drain: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport, whatever its class: uvloop's TCPTransport has every
        # method used here (write, close, is_closing, pause/resume_reading,
        # set_protocol, get_write_buffer_size) but does not subclass
        # asyncio.Transport, so an isinstance check would refuse every connection.
        self._transport = stream_transport(transport)
        gate = self._gate
        if gate is not None and not gate.admit():
            self._gate = None
            self._answer_and_close(
                TooManyConnections(
                    f"the proxy has {gate.limit} client connections open, its limit; "
                    "close idle connections or reuse one, then retry"
                )
            )
            return
        if self._header_timeout is not None:
            self._head_timer = asyncio.get_running_loop().call_later(
                self._header_timeout, self._head_timed_out
            )

    def _head_timed_out(self) -> None:
        self._head_timer = None
        assert self._transport is not None
        if self._transport.is_closing():
            return
        self._answer_and_close(
            RequestTimeout(
                f"no complete request head within {self._header_timeout:g} s; "
                "the connection is closed"
            )
        )

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def data_received(self, data: bytes) -> None:
        if self._upstream is not None:
            self._to_upstream(data)
            return
        self._buffer += data
        if may_be_preface(bytes(self._buffer)):
            if len(self._buffer) >= len(PREFACE):
                self._refuse_http2()
            return
        if not self._buffer.startswith(CONNECT[: len(self._buffer)]):
            self._hand_to_http()
        elif len(self._buffer) >= len(CONNECT) and b"\r\n\r\n" in self._buffer:
            self._connect()
        elif len(self._buffer) > MAX_HEAD:
            self._answer_and_close(MalformedRequest("the CONNECT head is too large"))

    def eof_received(self) -> bool | None:
        if self._upstream is not None and self._upstream.can_write_eof():
            self._upstream.write_eof()
            return True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        if self._gate is not None:
            self._gate.release()
            self._gate = None
        if self._upstream is not None:
            self._upstream.close()
        if self._pump is not None:
            self._pump.cancel()

    def _refuse_http2(self) -> None:
        assert self._transport is not None
        self._stop_head_timer()
        self._transport.write(h2_refusal.refusal())
        self._transport.close()

    def _hand_to_http(self) -> None:
        assert self._transport is not None
        self._stop_head_timer()
        # aiohttp's own keep-alive timer bounds the rest of the head from here on, and
        # its handler releases the connection's place in the gate when it closes.
        self._gate = None
        protocol = self._http_factory()
        self._transport.set_protocol(protocol)
        protocol.connection_made(self._transport)
        protocol.data_received(bytes(self._buffer))

    def _connect(self) -> None:
        self._stop_head_timer()
        head, _, rest = bytes(self._buffer).partition(b"\r\n\r\n")
        target = parse_authority(head)
        if target is None:
            self._answer_and_close(MalformedRequest("CONNECT needs host:port"))
            return
        host, port = target
        unusable = lookup_refusal(host)
        if unusable is not None:
            self._answer_and_close(
                MalformedRequest(
                    f"CONNECT {printable(host[:100])!r} does not name a host name or "
                    f"IP address: {unusable}"
                )
            )
            return
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        intercept = self._intercept
        guarded = self._policy.is_guarded(authority)
        if intercept is not None and guarded and intercept.serves(port):
            self._start_interception(intercept, target, head, rest)
            return
        refusal = self._policy.refusal(authority)
        if refusal is not None:
            if guarded and (intercept is None or intercept.leaves is None):
                refusal += INTERCEPT_HINT
            # Keyed by the reason (for a watched host, that host: one of the routes'),
            # never by the name as written, which a client can vary without end.
            cause = f"connect:guarded:{host_key(authority)}" if guarded else "connect"
            refusals.warning(cause, "CONNECT %s refused: %s", authority, refusal)
            self._answer_and_close(RouteRefused(refusal))
            return
        if self._policy.egress is not None:
            try:
                self._policy.egress.check(host, port)
            except EgressRefused as exc:
                self._answer_and_close(exc)
                return
        assert self._transport is not None
        self._transport.pause_reading()
        self._pump = asyncio.ensure_future(self._tunnel(target, rest))

    def _start_interception(
        self,
        intercept: Interception,
        target: tuple[str, int],
        head: bytes,
        rest: bytes,
    ) -> None:
        """Hand the connection (and its place in the gate) to the interception."""
        assert self._transport is not None
        self._transport.pause_reading()
        gate, self._gate = self._gate, None
        self._pump = asyncio.ensure_future(
            intercept.run(self._transport, *target, head, rest, gate)
        )

    async def _tunnel(self, target: tuple[str, int], rest: bytes) -> None:
        assert self._transport is not None
        try:
            reader, writer = await asyncio.wait_for(
                self._policy.open(*target), CONNECT_TIMEOUT
            )
        except EgressRefused as exc:
            self._answer_and_close(exc)
            return
        except (OSError, TimeoutError) as exc:
            detail = f"could not reach {target[0]}:{target[1]}: {exc}"
            self._answer_and_close(UpstreamUnreachable(detail))
            return
        self._upstream = writer
        self._transport.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        if rest:
            self._to_upstream(rest)
        self._transport.resume_reading()
        try:
            while chunk := await reader.read(65536):
                self._transport.write(chunk)
        except OSError:
            pass
        finally:
            writer.close()
            self._transport.close()

    def _to_upstream(self, data: bytes) -> None:
        assert self._upstream is not None and self._transport is not None
        self._upstream.write(data)
        if self._upstream.transport.get_write_buffer_size() > HIGH_WATER:
            self._transport.pause_reading()
            self._drain = asyncio.ensure_future(self._resume_after_drain())

    async def _resume_after_drain(self) -> None:
        assert self._upstream is not None and self._transport is not None
        try:
            await self._upstream.drain()
        except OSError:
            return
        if not self._transport.is_closing():
            self._transport.resume_reading()

    def _answer_and_close(self, error: EffectBrokerError) -> None:
        """``error`` as the shared mapping answers it (``answers.failure_answer``),
        written on the raw socket, which is then closed."""
        assert self._transport is not None
        self._stop_head_timer()
        answer = failure_answer(error)
        assert answer is not None  # an EffectBrokerError is always a failure
        self._transport.write(as_bytes(answer))
        self._transport.close()
