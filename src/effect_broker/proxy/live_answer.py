"""A recorded answer of unknown length, passed to the client while it is recorded.

The engine hands back the answer's head and an open ``RecordedStream``; this module
sends the head at once (``Effect-Status: dispatching``: nothing is settled yet), in
one write with whatever of the body came in with the target's head, gives the client
every chunk as the target sends it, and sends the end of the body (the last
chunk of chunked framing, or the close of an HTTP/1.0 answer) only once the stream has
settled the effect in the ledger. A stream that broke off, went quiet, or could not be
recorded is cut instead: the client sees an incomplete body, never a complete-looking
one the ledger does not hold.

The stream runs in a task of its own, shielded from the handler: a client that goes
away mid-stream does not stop the read from the target or the settlement.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web

from effect_broker.engine import STREAMED_HEADER, Answered, Sink, StreamEnd
from effect_broker.problems import effect_headers

# The streams running now: a task must be referenced until it ends (asyncio keeps weak
# references only), even when the handler that started it has gone.
_running: set[asyncio.Task[StreamEnd]] = set()

_NOT_PASSED_ON = frozenset({"effect-id", "effect-status", "content-length"})


async def stream_recorded(request: web.Request, outcome: Answered) -> web.StreamResponse:
    """Answer ``request`` with the streamed answer of ``outcome``, live."""
    attempt = outcome.attempt
    stream, head = attempt.stream, attempt.response
    assert stream is not None and head is not None
    arrived = stream.take_arrived()
    response = _HeadWithFirstBytes if arrived else web.StreamResponse
    out = response(status=head.status, reason=head.reason or None)
    for name, value in head.headers:
        if name.lower() not in _NOT_PASSED_ON and name != STREAMED_HEADER:
            out.headers.add(name, value)
    out.headers.update(effect_headers(outcome.effect))
    sink: Sink | None = out.write
    try:
        await out.prepare(request)
        if arrived:
            await out.write(arrived)  # with the head, in one write
    except ConnectionError:
        sink = None  # gone before the head: still read and settle
    task = asyncio.create_task(stream.run(sink))
    _running.add(task)
    task.add_done_callback(_running.discard)
    ended = await asyncio.shield(task)
    if ended.finished:
        with contextlib.suppress(ConnectionError):
            await out.write_eof()
    else:
        _cut(request)
    return out


class _HeadWithFirstBytes(web.StreamResponse):
    """A streamed answer whose head waits in aiohttp's writer for the first write of
    the body, so that both leave in one packet (what aiohttp's ``web.Response`` does).

    Used when the first bytes of the body are already here: the client's first byte
    then needs one packet and one wake-up instead of two. Without any (a target that
    sends its head and then thinks), the head goes at once, as a client waiting for
    it should see it.
    """

    _send_headers_immediately = False


def _cut(request: web.Request) -> None:
    """End the connection without the end of the body: the client sees it incomplete."""
    if request.transport is not None:
        request.transport.close()
