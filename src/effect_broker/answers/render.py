"""An ``Answer`` framed for the wire: problem+json for HTTP, bytes for a raw socket,
a JSON-RPC error for MCP. The framing only; what the answer says is decided in
``table`` (outcomes) and ``failures`` (exceptions). Also the one way a body longer
than a receipt holds reaches its client (``stream_overflow``), for both adapters."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from aiohttp import web

from effect_broker.answers.table import Answer
from effect_broker.engine import Answered
from effect_broker.problems import (
    Problem,
    effect_headers,
    jsonrpc_error,
    problem,
    problem_bytes,
    problem_response,
)

RequestId = str | int


def _options(answer: Answer) -> dict[str, Any]:
    return {
        "status": answer.status,
        "effect": answer.effect,
        "retry_after": answer.retry_after,
        "retry_helps": answer.retry_helps,
        "message": answer.message,
        "extra": answer.extra,
        "headers": answer.headers,
    }


def as_problem(answer: Answer) -> Problem:
    """The problem document ``answer`` stands for."""
    return problem(answer.error, **_options(answer))


def as_response(answer: Answer) -> web.Response:
    """``answer`` as an RFC 9457 problem+json response."""
    response = problem_response(answer.error, **_options(answer))
    if answer.close:
        response.force_close()
    return response


def as_bytes(answer: Answer) -> bytes:
    """``answer`` as a whole HTTP/1.1 message that closes its connection."""
    return problem_bytes(answer.error, **_options(answer))


def as_jsonrpc(
    answer: Answer, request_id: RequestId | None, code: int, *, status: int = 200
) -> web.Response:
    """``answer`` as a JSON-RPC error under ``code``, the problem in ``error.data``;
    ``status`` is the HTTP status of the transport (200 for a message it could read)."""
    out = jsonrpc_error(
        as_problem(answer), request_id=request_id, code=code, status=status
    )
    response = web.Response(
        status=out.status,
        body=out.body,
        headers=out.headers,
        content_type="application/json",
    )
    if answer.close:
        response.force_close()
    return response


async def stream_overflow(
    outcome: Answered,
    request: web.Request,
    *,
    dropped: Collection[str] = (),
    reason: bool = True,
) -> web.StreamResponse:
    """A body longer than a receipt holds: this client gets all of it, live, as the
    target sent it (the receipt records the effect without the body); the attempt's
    connection is released whatever happens. ``dropped``: lower-case names of the
    target's headers not copied; ``reason``: keep the target's reason phrase."""
    attempt = outcome.attempt
    assert attempt.response is not None and attempt.overflow is not None
    first = attempt.response
    out = web.StreamResponse(
        status=first.status, reason=(first.reason or None) if reason else None
    )
    for name, value in first.headers:
        if name.lower() not in dropped:
            out.headers.add(name, value)
    out.headers.update(effect_headers(outcome.effect))
    try:
        await out.prepare(request)
        await out.write(first.body)
        async for chunk in attempt.overflow.content.iter_any():
            await out.write(chunk)
        await out.write_eof()
    finally:
        attempt.release()
    return out
