"""One attempt at the target, classified by what it proves.

aiohttp's error tree already separates "never connected" from "connected, then lost":
``ClientConnectorError`` (refused, DNS, TLS handshake) and a connect timeout mean no byte
of the request left, so a retry is safe for any contract. Anything after that (a read
timeout, a reset, a disconnect mid-response) means the target may have committed: the
outcome is unknown. aiohttp would resend an idempotent method (PUT, DELETE, GET) once
when a reused connection turns out closed; ``client_session`` turns that off, and this
module adds no retry either: the state machine owns retries.

Every connection the upstream client opens writes through a ``FencedTransport``: an
attempt sent under a ``fence.SendWindow`` offers its first byte only while the window is
open, and otherwise writes nothing at all (``Delivery.NOT_SENT``, ``withheld``).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Awaitable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, cast

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.client_reqrep import ClientRequest
from opentelemetry.trace import INVALID_SPAN, Span, SpanKind, StatusCode
from yarl import URL

from effect_broker.engine.fence import SendWindow, current_window
from effect_broker.engine.messages import StoredResponse
from effect_broker.engine.protocol import AnswerWatch
from effect_broker.engine.stream import RecordedStream, streams_live
from effect_broker.headers import Headers, response_headers
from effect_broker.tracing import tracer, untraced, with_current_context

# The one statement of "proved not sent": aiohttp raises these only before a byte of
# the request could leave (no connection was ever made), so what raised them may be
# tried again under any contract. ``TLS_REFUSED`` is the part of it where the handshake
# failed the proxy's own verification: a matter of configuration, not of the target.
# Every sender (the engine's attempts, the pass-through, MCP's forwarding) catches
# these names rather than listing the classes again.
TLS_REFUSED: tuple[type[aiohttp.ClientConnectorError], ...] = (
    aiohttp.ClientConnectorCertificateError,
    aiohttp.ClientConnectorSSLError,
)
NEVER_CONNECTED: tuple[type[aiohttp.ClientError], ...] = (
    aiohttp.ClientConnectorError,
    aiohttp.ConnectionTimeoutError,
)


class Delivery(StrEnum):
    ANSWERED = "answered"  # the target sent a complete response
    NOT_SENT = "not_sent"  # provably nothing left: connection never established
    UNKNOWN = "unknown"  # bytes may have reached the target; its answer was lost


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """What one attempt proved. ``overflow`` is the still-open answer when its body is
    longer than a receipt may hold: ``response.body`` has the first bytes, the caller
    streams the rest to the client and must ``release()``. ``live`` is the open answer
    of unknown length (``stream.streams_live``): ``response`` is its head only, and the
    dispatcher turns it into ``stream``, which the caller must run to the end."""

    delivery: Delivery
    response: StoredResponse | None = None
    detail: str = ""
    overflow: aiohttp.ClientResponse | None = None
    elapsed: float = 0.0  # seconds spent waiting on the target
    timed_out: bool = False  # UNKNOWN because the contract's timeout ran out
    saturated: bool = False  # NOT_SENT because no connection to the target was free
    tls: bool = False  # NOT_SENT because the target's TLS certificate failed to verify
    withheld: bool = False  # NOT_SENT because the attempt's lease might have run out
    live: aiohttp.ClientResponse | None = None
    stream: RecordedStream | None = None
    body_omitted: bool = False  # a streamed body longer than a receipt holds

    def release(self) -> None:
        if self.overflow is not None:
            self.overflow.release()
        if self.live is not None:
            self.live.close()


def upstream_tls(extra_ca_file: Path | None = None) -> ssl.SSLContext:
    """Verification for every upstream: the system trust store, plus a PEM bundle for
    private CAs. There is deliberately no way to turn verification off."""
    context = ssl.create_default_context()
    if extra_ca_file is not None:
        context.load_verify_locations(cafile=extra_ca_file)
    return context


class WindowClosed(ConnectionResetError):
    """Raised into aiohttp at a refused first write; what the attempt proved is then
    said once, by ``_sent_within``, whatever error aiohttp made of this."""


class FencedTransport:
    """A connection's transport that asks the current attempt's ``SendWindow`` before
    every write; everything else is the wrapped transport's own.

    The check sits at the last moment the proxy controls, the write into the socket,
    because aiohttp writes a request's body from a task of its own after connecting:
    a window checked any earlier leaves a pause of the sender unfenced.
    """

    __slots__ = ("_transport",)

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport

    def _admit(self) -> None:
        window = current_window.get()
        if window is not None and not window.admit():
            self._transport.abort()
            raise WindowClosed("the attempt's send window had closed")

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._admit()
        self._transport.write(data)

    def writelines(self, chunks: Iterable[bytes | bytearray | memoryview]) -> None:
        self._admit()
        self._transport.writelines(chunks)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class FencedConnector(aiohttp.TCPConnector):
    """A TCP connector whose every new connection writes through a ``FencedTransport``
    (a pooled connection keeps it; requests without a window write freely)."""

    async def _create_connection(
        self, req: ClientRequest, traces: list[Any], timeout: aiohttp.ClientTimeout
    ) -> ResponseHandler:
        protocol = await super()._create_connection(req, traces, timeout)
        if protocol.transport is not None:
            protocol.transport = cast(
                asyncio.Transport, FencedTransport(protocol.transport)
            )
        return protocol


def one_try(session: aiohttp.ClientSession) -> aiohttp.ClientSession:
    """Turn off aiohttp's silent second try of an idempotent method on a reused
    connection that the server had closed (RFC 9112 9.3.1 allows it; for an effect
    it is a hidden retry, and the state machine owns retries). aiohttp has no public
    switch for it."""
    session._retry_connection = False
    return session


def client_session(
    *, limit: int = 100, tls: ssl.SSLContext | None = None
) -> aiohttp.ClientSession:
    """The upstream client: bodies passed through undecoded, no cookies, no env proxy,
    certificates verified (``tls``, else the system trust store), one try per request,
    every connection fenced."""
    return one_try(
        aiohttp.ClientSession(
            connector=FencedConnector(
                limit=limit, ttl_dns_cache=60, ssl=tls or upstream_tls()
            ),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept", "Content-Type"),
        )
    )


async def send(
    session: aiohttp.ClientSession,
    *,
    method: str,
    url: str,
    headers: Headers,
    body: bytes,
    timeout: timedelta,
    max_body: int,
    watch: AnswerWatch | None = None,
    window: SendWindow | None = None,
    streamable: bool = False,
) -> AttemptResult:
    """Send once and read at most ``max_body`` bytes of the answer, in a client span
    whose context the target receives. The URL is not an attribute: a lookup's URL
    carries the derived key, which no span may hold. ``watch`` may end the read early
    (``protocol.CutsShort``); ``window`` fences the first byte (``fence``).
    ``streamable``: an answer of unknown length comes back open, as ``live``, once its
    head has arrived within ``timeout`` (``stream``)."""
    target = URL(url, encoded=True)
    span_scope: AbstractContextManager[Span] = (
        nullcontext(INVALID_SPAN)
        if untraced()
        else tracer.start_as_current_span(
            method,
            kind=SpanKind.CLIENT,
            attributes={
                "http.request.method": method,
                "server.address": target.host or "",
                "server.port": target.port or 0,
                "url.scheme": target.scheme,
            },
        )
    )
    fenced = current_window.set(window)
    try:
        with span_scope as span:
            result = await _sent_within(
                window,
                _send(
                    session,
                    method=method,
                    url=target,
                    headers=with_current_context(headers),
                    body=body,
                    timeout=timeout,
                    max_body=max_body,
                    watch=watch,
                    streamable=streamable,
                ),
            )
            if result.response is not None:
                span.set_attribute("http.response.status_code", result.response.status)
            else:
                span.set_status(StatusCode.ERROR, result.delivery.value)
            return result
    finally:
        current_window.reset(fenced)


async def _sent_within(
    window: SendWindow | None, sending: Awaitable[AttemptResult]
) -> AttemptResult:
    """What ``sending`` proved, unless the fence withheld its first byte: then nothing
    left, whatever error aiohttp made of the refused write."""
    result = await sending
    if window is not None and window.withheld:
        result.release()
        return AttemptResult(
            Delivery.NOT_SENT,
            detail=f"send withheld: this attempt's lease could have run out before "
            f"its first byte ({window.late_by():.3f}s past its send window), so "
            "nothing was sent",
            elapsed=result.elapsed,
            withheld=True,
        )
    return result


async def _send(
    session: aiohttp.ClientSession,
    *,
    method: str,
    url: URL,
    headers: Headers,
    body: bytes,
    timeout: timedelta,
    max_body: int,
    watch: AnswerWatch | None = None,
    streamable: bool = False,
) -> AttemptResult:
    seconds = timeout.total_seconds()
    started = time.perf_counter()
    response: aiohttp.ClientResponse | None = None
    try:
        async with asyncio.timeout(seconds):
            response = await session.request(
                method,
                url,
                headers=headers,
                data=body if body else None,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=None, connect=seconds),
            )
            if streamable and streams_live(
                method, response.status, response.content_length
            ):
                return AttemptResult(
                    Delivery.ANSWERED,
                    _head(response),
                    live=response,
                    elapsed=time.perf_counter() - started,
                )
            payload, cut = await _read_up_to(response, max_body + 1, watch)
            overflow = cut is None and len(payload) > max_body
            if cut is not None:
                response.close()  # the rest is never read: not reusable
            elif not overflow:
                response.release()
    except TLS_REFUSED as exc:
        # The handshake failed, so not one byte of the request left: not sent.
        return AttemptResult(
            Delivery.NOT_SENT,
            detail=tls_failure(URL(url, encoded=True).host, exc),
            elapsed=time.perf_counter() - started,
            tls=True,
        )
    except NEVER_CONNECTED as exc:
        return AttemptResult(
            Delivery.NOT_SENT,
            detail=f"could not connect: {exc}",
            elapsed=time.perf_counter() - started,
        )
    except TimeoutError:
        _close(response)
        return AttemptResult(
            Delivery.UNKNOWN,
            detail=f"no complete answer within {seconds:g}s",
            elapsed=time.perf_counter() - started,
            timed_out=True,
        )
    except (aiohttp.ClientError, OSError) as exc:
        _close(response)
        return AttemptResult(
            Delivery.UNKNOWN,
            detail=f"connection lost after sending: {exc!r}",
            elapsed=time.perf_counter() - started,
        )
    return AttemptResult(
        Delivery.ANSWERED,
        _head(response, payload),
        detail=cut or "",
        overflow=response if overflow else None,
        elapsed=time.perf_counter() - started,
    )


def _head(response: aiohttp.ClientResponse, body: bytes = b"") -> StoredResponse:
    return StoredResponse(
        status=response.status,
        reason=response.reason or "",
        headers=response_headers(response.headers.items()),
        body=body,
    )


def tls_failure(host: str | None, exc: aiohttp.ClientConnectorError) -> str:
    """The sentence for a failed upstream handshake: which host, and why."""
    cause = exc.os_error
    reason = getattr(cause, "verify_message", None) or getattr(cause, "reason", None)
    return f"TLS with {host} failed: {reason or cause}"


async def _read_up_to(
    response: aiohttp.ClientResponse, limit: int, watch: AnswerWatch | None = None
) -> tuple[bytes, str | None]:
    """Read until EOF, ``limit`` bytes, or ``watch`` gives a reason (returned with the
    bytes; the empty ``protocol.COMPLETE`` too); a body that ends early raises
    ClientPayloadError."""
    payload = bytearray()
    content_type = response.headers.get("Content-Type")
    while len(payload) < limit:
        chunk = await response.content.read(limit - len(payload))
        if not chunk:
            break
        payload += chunk
        if watch is not None and (reason := watch(content_type, chunk)) is not None:
            return bytes(payload), reason
    return bytes(payload), None


def _close(response: aiohttp.ClientResponse | None) -> None:
    if response is not None:
        response.close()
