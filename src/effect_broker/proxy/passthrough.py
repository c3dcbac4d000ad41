"""Requests no route claims: forwarded untouched, streamed both ways, never recorded."""

from __future__ import annotations

import aiohttp
from aiohttp import web
from yarl import URL

from effect_broker.errors import UpstreamUnreachable
from effect_broker.headers import passthrough_request_headers, response_headers
from effect_broker.problems import problem_response


async def pass_through(
    request: web.Request, session: aiohttp.ClientSession
) -> web.StreamResponse:
    has_body = request.body_exists
    try:
        upstream = await session.request(
            request.method,
            URL(request.raw_path, encoded=True),
            headers=passthrough_request_headers(request.headers.items()),
            data=request.content if has_body else None,
            allow_redirects=False,
        )
    except (aiohttp.ClientError, OSError) as exc:
        return problem_response(
            UpstreamUnreachable(f"could not reach {request.host}: {exc}"), status=502
        )
    try:
        out = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for name, value in response_headers(upstream.headers.items()):
            out.headers.add(name, value)
        if upstream.content_length is not None:
            out.content_length = upstream.content_length
        await out.prepare(request)
        async for chunk in upstream.content.iter_any():
            await out.write(chunk)
        await out.write_eof()
        return out
    finally:
        upstream.release()
