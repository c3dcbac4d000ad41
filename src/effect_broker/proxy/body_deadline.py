"""A deadline for the whole request body, counted from the moment its head is handled.

aiohttp bounds the wait for a request head (``keepalive_timeout``) but nothing bounds
its body: a client sending one byte a second holds a connection, and a place under
``EFFECT_BROKER_MAX_CONNECTIONS``, for as long as it likes. Every reader of a body
(the recorded flow, MCP, pass-through, streamed or not) reads it from the request's
``StreamReader``, so the deadline acts there: when it passes before the body has
arrived in full, the stream is failed with ``RequestTimeout`` and whichever reader is
waiting raises it. Nothing has been recorded then (a body is read whole before the
engine sees the intent), and the answer closes the connection, whose framing is lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

from aiohttp import StreamReader, web

from effect_broker.errors import RequestTimeout


def body_timed_out(seconds: float) -> RequestTimeout:
    return RequestTimeout(
        f"the request body did not arrive in full within {seconds:g} s "
        "(EFFECT_BROKER_BODY_TIMEOUT); nothing was recorded, no complete request was "
        "forwarded, and the "
        "connection is closed. Send the body at once, or raise the limit"
    )


#: The deadline of a body that has already arrived in full: nothing to watch.
_ARRIVED = nullcontext()


def body_deadline(request: web.Request, seconds: float) -> AbstractContextManager[None]:
    """Fail ``request``'s body stream with ``RequestTimeout`` unless it has arrived in
    full ``seconds`` from now; a body already complete (most requests: it came with the
    head) costs one check, not a timer nor a generator."""
    content = request.content
    if content.is_eof():
        return _ARRIVED
    return _watched(content, seconds)


@contextmanager
def _watched(content: StreamReader, seconds: float) -> Iterator[None]:
    def expire() -> None:
        if not content.is_eof() and content.exception() is None:
            content.set_exception(body_timed_out(seconds))

    timer = asyncio.get_running_loop().call_later(seconds, expire)
    try:
        yield
    finally:
        timer.cancel()


def timed_out_body(request: web.Request) -> RequestTimeout | None:
    """The deadline's error if it failed ``request``'s body, for a reader (an HTTP
    client streaming it upstream) that reports the failure as its own."""
    failure = request.content.exception()
    return failure if isinstance(failure, RequestTimeout) else None
