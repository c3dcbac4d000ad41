"""One attempt at the target, classified by what it proves.

aiohttp's error tree already separates "never connected" from "connected, then lost":
``ClientConnectorError`` (refused, DNS, TLS handshake) and a connect timeout mean no byte
of the request left, so a retry is safe for any contract. Anything after that (a read
timeout, a reset, a disconnect mid-response) means the target may have committed: the
outcome is unknown. aiohttp never retries a POST on its own, and this module adds no
retry either: the state machine owns retries.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from pathlib import Path

import aiohttp
from opentelemetry.trace import INVALID_SPAN, Span, SpanKind, StatusCode
from yarl import URL

from effect_broker.engine.messages import StoredResponse
from effect_broker.engine.protocol import AnswerWatch
from effect_broker.headers import Headers, response_headers
from effect_broker.tracing import tracer, untraced, with_current_context


class Delivery(StrEnum):
    ANSWERED = "answered"  # the target sent a complete response
    NOT_SENT = "not_sent"  # provably nothing left: connection never established
    UNKNOWN = "unknown"  # bytes may have reached the target; its answer was lost


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """What one attempt proved. ``overflow`` is the still-open answer when its body is
    longer than a receipt may hold: ``response.body`` has the first bytes, the caller
    streams the rest to the client and must ``release()``."""

    delivery: Delivery
    response: StoredResponse | None = None
    detail: str = ""
    overflow: aiohttp.ClientResponse | None = None
    elapsed: float = 0.0  # seconds spent waiting on the target
    timed_out: bool = False  # UNKNOWN because the contract's timeout ran out
    saturated: bool = False  # NOT_SENT because no connection to the target was free
    tls: bool = False  # NOT_SENT because the target's TLS certificate failed to verify

    def release(self) -> None:
        if self.overflow is not None:
            self.overflow.release()


def upstream_tls(extra_ca_file: Path | None = None) -> ssl.SSLContext:
    """Verification for every upstream: the system trust store, plus a PEM bundle for
    private CAs. There is deliberately no way to turn verification off."""
    context = ssl.create_default_context()
    if extra_ca_file is not None:
        context.load_verify_locations(cafile=extra_ca_file)
    return context


def client_session(
    *, limit: int = 100, tls: ssl.SSLContext | None = None
) -> aiohttp.ClientSession:
    """The upstream client: bodies passed through undecoded, no cookies, no env proxy,
    certificates verified (``tls``, else the system trust store)."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(
            limit=limit, ttl_dns_cache=60, ssl=tls or upstream_tls()
        ),
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
        skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept", "Content-Type"),
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
) -> AttemptResult:
    """Send once and read at most ``max_body`` bytes of the answer, in a client span
    whose context the target receives. The URL is not an attribute: a lookup's URL
    carries the derived key, which no span may hold. ``watch`` may end the read early
    (``protocol.CutsShort``)."""
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
    with span_scope as span:
        result = await _send(
            session,
            method=method,
            url=target,
            headers=with_current_context(headers),
            body=body,
            timeout=timeout,
            max_body=max_body,
            watch=watch,
        )
        if result.response is not None:
            span.set_attribute("http.response.status_code", result.response.status)
        else:
            span.set_status(StatusCode.ERROR, result.delivery.value)
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
            payload, cut = await _read_up_to(response, max_body + 1, watch)
            overflow = cut is None and len(payload) > max_body
            if cut is not None:
                response.close()  # the rest is never read: not reusable
            elif not overflow:
                response.release()
    except (
        aiohttp.ClientConnectorCertificateError,
        aiohttp.ClientConnectorSSLError,
    ) as exc:
        # The handshake failed, so not one byte of the request left: not sent.
        return AttemptResult(
            Delivery.NOT_SENT,
            detail=tls_failure(URL(url, encoded=True).host, exc),
            elapsed=time.perf_counter() - started,
            tls=True,
        )
    except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
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
    stored = StoredResponse(
        status=response.status,
        reason=response.reason or "",
        headers=response_headers(response.headers.items()),
        body=payload,
    )
    return AttemptResult(
        Delivery.ANSWERED,
        stored,
        detail=cut or "",
        overflow=response if overflow else None,
        elapsed=time.perf_counter() - started,
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
