"""Unrecorded traffic on an MCP route: forwarded to the route's upstream as it came.

``initialize``, ``ping``, notifications, ``resources/read``, read-only tools and the
transport's GET (the server's event stream) and DELETE (end of session) are not
effects: they are streamed both ways, the route's injected credentials added and the
operation key header removed. ``tools/list`` is the one answer the proxy reads whole,
to mirror the schema (``tools_schema``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import aiohttp
from aiohttp import web

from effect_broker.config.contracts import Route
from effect_broker.engine import NEVER_CONNECTED
from effect_broker.errors import OutcomeUnknown, UpstreamUnreachable
from effect_broker.headers import response_headers, upstream_request_headers
from effect_broker.mcp.jsonrpc import (
    NOT_SENT,
    OUTCOME_UNKNOWN,
    RequestId,
    encode,
    find_response,
    is_sse,
    replace_sse_response,
)
from effect_broker.mcp.streams import OpenStreams
from effect_broker.mcp.tools_schema import mirror_tools
from effect_broker.problems import jsonrpc_problem
from effect_broker.ratelimited_log import RateLimitedLog

log = logging.getLogger("effect_broker.mcp")
# A client closing its event stream is routine: one line per route a minute at most.
disconnects = RateLimitedLog(log, interval=60.0)

# A body the transport re-frames: never copied from upstream to the client.
_REFRAMED = {"content-length", "content-type", "transfer-encoding", "content-encoding"}


def _headers(
    request: web.Request, route: Route, inject: Mapping[str, str]
) -> list[tuple[str, str]]:
    return upstream_request_headers(
        request.headers.items(),
        operation_key_header=route.operation_key_header,
        downstream_header=None,
        downstream_key=None,
        inject=inject,
    )


async def _open(
    session: aiohttp.ClientSession,
    request: web.Request,
    url: str,
    headers: list[tuple[str, str]],
    body: bytes | None,
) -> aiohttp.ClientResponse:
    return await session.request(
        request.method,
        url,
        headers=headers,
        data=body,
        allow_redirects=False,
        timeout=aiohttp.ClientTimeout(total=None, connect=10, sock_read=None),
    )


def _failure(exc: Exception, request_id: RequestId | None, *, sent: bool) -> web.Response:
    if not sent:
        error: Exception = UpstreamUnreachable(
            f"could not reach the MCP server ({exc}); nothing was sent"
        )
        code = NOT_SENT
    else:
        error = OutcomeUnknown(
            f"the MCP server's answer was lost ({exc!r}); this message was not recorded"
        )
        code = OUTCOME_UNKNOWN
    assert isinstance(error, UpstreamUnreachable | OutcomeUnknown)
    answer = jsonrpc_problem(error, request_id=request_id, code=code, status=502)
    return web.Response(
        status=answer.status,
        body=answer.body,
        headers=answer.headers,
        content_type="application/json",
    )


async def forward(
    session: aiohttp.ClientSession,
    request: web.Request,
    route: Route,
    url: str,
    inject: Mapping[str, str],
    body: bytes | None,
    *,
    request_id: RequestId | None = None,
    streams: OpenStreams | None = None,
) -> web.StreamResponse:
    """Send as it came and stream the answer back, whatever its length. With
    ``streams`` (the transport's GET) the answer also ends when the process stops."""
    try:
        upstream = await _open(
            session, request, url, _headers(request, route, inject), body
        )
    except NEVER_CONNECTED as exc:
        return _failure(exc, request_id, sent=False)
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return _failure(exc, request_id, sent=True)
    try:
        out = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for name, value in response_headers(upstream.headers.items()):
            if name.lower() not in ("content-length", "transfer-encoding"):
                out.headers.add(name, value)
        await out.prepare(request)
        try:
            if streams is not None:
                await streams.relay(upstream, out)
            else:
                async for chunk in upstream.content.iter_any():
                    await out.write(chunk)
            await out.write_eof()
        except ConnectionResetError:
            # The client went away (it closed its event stream, say): routine, one
            # line; nothing here was recorded, so there is nothing to settle.
            disconnects.log(
                logging.INFO,
                f"gone:{route.name}",
                "%s on MCP route %s: the client closed the connection while its "
                "unrecorded answer was streaming; the rest was dropped",
                request.method,
                route.name,
            )
        return out
    finally:
        upstream.release()


async def list_tools(
    session: aiohttp.ClientSession,
    request: web.Request,
    route: Route,
    url: str,
    inject: Mapping[str, str],
    body: bytes,
    request_id: RequestId | None,
) -> web.StreamResponse:
    """``tools/list``, its answer rewritten so mutating tools require the key."""
    assert route.mcp is not None
    try:
        upstream = await _open(
            session, request, url, _headers(request, route, inject), body
        )
    except NEVER_CONNECTED as exc:
        return _failure(exc, request_id, sent=False)
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return _failure(exc, request_id, sent=True)
    try:
        payload = await upstream.read()
    except (aiohttp.ClientError, OSError) as exc:
        upstream.release()
        return _failure(exc, request_id, sent=True)
    headers = [
        (name, value)
        for name, value in response_headers(upstream.headers.items())
        if name.lower() not in _REFRAMED
    ]
    answer = find_response(upstream.headers.get("Content-Type"), payload)
    if answer is None or "result" not in answer:
        out = web.Response(status=upstream.status, body=payload)
        for name, value in response_headers(upstream.headers.items()):
            if name.lower() != "content-length":
                out.headers.add(name, value)
        return out
    mcp = route.mcp
    answer["result"] = mirror_tools(
        answer["result"], mcp.tools, mcp.operation_key_argument
    )
    # An SSE answer stays one, priming event and all: a client (or a conformance
    # check) sees the framing the server chose, only the tools rewritten.
    reframed = (
        replace_sse_response(payload, answer)
        if is_sse(upstream.headers.get("Content-Type"))
        else None
    )
    if reframed is not None:
        out = web.Response(
            status=upstream.status, body=reframed, content_type="text/event-stream"
        )
    else:
        out = web.Response(
            status=upstream.status, body=encode(answer), content_type="application/json"
        )
    for name, value in headers:
        out.headers.add(name, value)
    return out
