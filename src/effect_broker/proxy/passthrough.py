"""Requests no route claims: forwarded untouched, never recorded.

Untouched includes the framing. A ``Content-Length`` body is read whole (up to the
pass-through limit, 413 beyond) and sent with its length: handing aiohttp's stream to
the client session would re-frame it as ``Transfer-Encoding: chunked``, which targets
that only read ``Content-Length`` bodies (Python's ``http.server``, many embedded
servers) receive as empty. A chunked body has no length to keep and is streamed through
chunked. Userinfo in an absolute-form URL is dropped: aiohttp's client would turn it
into ``Authorization: Basic`` for the target, a credential the client never sent as one.
Where the request may go at all is the egress policy's decision (``proxy.egress``).

The answer goes back in one write when it is small and has a length (most API answers):
read whole, it leaves as one ``Response``, headers and body together, instead of a head
and then the body as separate writes. A large or unframed answer is streamed, so memory
stays bounded by ``BUFFER_AT_MOST``.

Nothing here is recorded, so an error answer is all the client learns: a connection
that never opened is ``upstream-unreachable`` (nothing was sent), one that broke after
it opened is ``outcome-unknown`` (the target may have acted on the request).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

import aiohttp
from aiohttp import web
from yarl import URL

from effect_broker.engine import NEVER_CONNECTED, TLS_REFUSED, tls_failure
from effect_broker.errors import (
    BodyTooLarge,
    MalformedRequest,
    OutcomeUnknown,
    UpstreamTLS,
    UpstreamUnreachable,
)
from effect_broker.headers import passthrough_request_headers, response_headers
from effect_broker.problems import problem_response
from effect_broker.proxy.body_deadline import timed_out_body
from effect_broker.proxy.edge import EDGE_LIMITS
from effect_broker.proxy.egress import EgressGuard
from effect_broker.ratelimited_log import RateLimitedLog

log = logging.getLogger("effect_broker.passthrough")
# A client closing a long stream is routine: one line per host a minute at most.
disconnects = RateLimitedLog(log, interval=60.0)

#: Answers with a Content-Length up to this are read whole and sent in one write.
BUFFER_AT_MOST = 256 * 1024
#: Answers that carry no body whatever their headers say (RFC 9110, 6.4.1).
BODILESS_STATUSES = frozenset({204, 304})


async def pass_through(
    request: web.Request,
    session: aiohttp.ClientSession,
    egress: EgressGuard,
    *,
    headers: Mapping[str, str] | None = None,
    url: URL | None = None,
    inject: Mapping[str, str] | None = None,
) -> web.StreamResponse:
    """Forward ``request`` as it came; ``headers`` are added to the answer.

    ``url`` is where it goes when that is not its own absolute-form target (reverse
    mode, under a route's prefix), and ``inject`` the route's headers it then carries.
    """
    if url is None:
        url = URL(request.raw_path, encoded=True)
        if url.raw_user is not None or url.raw_password is not None:  # never sent on
            url = url.with_user(None)
    host = url.host
    where = host or request.host
    # The host as written, before anything is read or sent; the session's resolver
    # checks each address a name resolves to when it connects.
    egress.check(host or "", url.port or 80)
    limit = request.app[EDGE_LIMITS].max_passthrough_bytes
    length = request.content_length
    data: bytes | aiohttp.StreamReader | None = None
    if length is not None:
        if length > limit:
            response = problem_response(
                BodyTooLarge(
                    f"the body is {length} bytes; this proxy passes through at most "
                    f"{limit} (EFFECT_BROKER_MAX_PASSTHROUGH_BYTES)"
                )
            )
            response.force_close()  # the body was not read; the connection cannot stay
            return response
        try:
            data = await request.content.readexactly(length) if length else b""
        except asyncio.IncompleteReadError:
            raise MalformedRequest(
                f"the body ended before its Content-Length of {length} bytes; "
                "nothing was forwarded"
            ) from None
    elif request.body_exists:
        data = request.content
    try:
        upstream = await session.request(
            request.method,
            url,
            headers=_outgoing_headers(request, inject or {}),
            data=data,
            allow_redirects=False,
        )
    except TLS_REFUSED as exc:
        return problem_response(
            UpstreamTLS(f"{tls_failure(url.host, exc)}; nothing was forwarded")
        )
    except NEVER_CONNECTED as exc:
        return problem_response(
            UpstreamUnreachable(f"could not reach {where}: {exc}"), status=502
        )
    except (aiohttp.ClientError, OSError) as exc:
        if (late := timed_out_body(request)) is not None:
            # The client's body never arrived in full, so neither did the request.
            raise late from None
        # Connected, so the request may have arrived whole: never "nothing was sent".
        return problem_response(
            OutcomeUnknown(
                f"the connection to {where} broke after the request was sent "
                f"({type(exc).__name__}); it was passed through unrecorded, so the "
                "target may have acted on it and nothing will retry it"
            ),
            status=502,
        )
    try:
        kept = response_headers(upstream.headers.items())
        if _fits_one_write(request, upstream):
            try:
                body = await upstream.read()
            except (aiohttp.ClientError, OSError) as exc:
                return problem_response(
                    OutcomeUnknown(
                        f"the answer from {where} broke off "
                        f"({type(exc).__name__}); the request was passed through "
                        "unrecorded, so the target may have acted on it"
                    ),
                    status=502,
                )
            out = web.Response(status=upstream.status, reason=upstream.reason, body=body)
            _set_headers(out, kept, headers)
            return out
        streamed = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        _set_headers(streamed, kept, headers)
        if upstream.content_length is not None:
            streamed.content_length = upstream.content_length
        await streamed.prepare(request)
        try:
            async for chunk in upstream.content.iter_any():
                await streamed.write(chunk)
            await streamed.write_eof()
        except ConnectionResetError:
            # The client went away mid-answer (a closed SSE stream, say): what it is,
            # in one line; nothing was recorded, so there is nothing to settle.
            disconnects.log(
                logging.INFO,
                f"gone:{where}",
                "%s %s: the client closed the connection while its unrecorded answer "
                "was streaming; the rest was dropped",
                request.method,
                url.with_query(None),
            )
        return streamed
    finally:
        upstream.release()


def _outgoing_headers(
    request: web.Request, inject: Mapping[str, str]
) -> list[tuple[str, str]]:
    """The client's headers (connection plumbing dropped), the route's ``inject``
    replacing any of the same name."""
    if not inject:  # forward mode, and most routes: nothing to replace
        return passthrough_request_headers(request.headers.items())
    replaced = {name.lower() for name in inject}
    kept = [
        (name, value)
        for name, value in passthrough_request_headers(request.headers.items())
        if name.lower() not in replaced
    ]
    return kept + list(inject.items())


def _fits_one_write(request: web.Request, upstream: aiohttp.ClientResponse) -> bool:
    """A small answer with a length and a body: read whole, sent as one write."""
    length = upstream.content_length
    return (
        length is not None
        and length <= BUFFER_AT_MOST
        and request.method != "HEAD"
        and upstream.status not in BODILESS_STATUSES
    )


def _set_headers(
    out: web.StreamResponse,
    kept: list[tuple[str, str]],
    ours: Mapping[str, str] | None,
) -> None:
    """The target's headers with their repeats, then ours replacing a same-named one."""
    headers = out.headers
    for name, value in kept:
        headers.add(name, value)
    if ours:
        headers.update(ours)
