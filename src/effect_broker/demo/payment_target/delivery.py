"""How the demo target sends a committed charge's answer, or loses it on purpose.

The losses (a withheld answer, an answer cut mid-stream) are the cases that make naive
retries double-charge; they live here, apart from the handlers that decide what the
answer is.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from effect_broker.demo.payment_target.faults import Faults
from effect_broker.demo.payment_target.state import FAULTS, SETTINGS, Answer, subject

log = logging.getLogger("payment_target")

#: How long a withheld answer is held back: far longer than any client waits.
HANG_SECONDS = 3600.0


class StreamedAnswer(web.StreamResponse):
    """An answer sent as a stream (chunked, no Content-Length), with its outcome."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(status=answer.status)
        for name, value in answer.headers.items():
            if name.lower() != "content-length":
                self.headers[name] = value
        self.outcome = f"{answer.outcome}, streamed and cut (fault stream_after_commit)"


async def deliver(request: web.Request, answer: Answer) -> web.StreamResponse:
    """Send a committed charge's answer, unless a fault says to lose it.

    A withheld answer models the worst case for any retrying client: the charge is
    committed, yet the caller sees only a timeout. The handler sleeps far longer than
    any client waits; stopping the server cancels it, dropping the connection unanswered.
    A streamed answer (``stream_after_commit``) is the same loss in the middle of a
    body: its first half goes out chunked, the rest never does.
    """
    faults = request.app[FAULTS]
    prefixes = request.app[SETTINGS].hang_prefixes
    if faults.take("stream_after_commit"):
        streamed = StreamedAnswer(answer)
        await streamed.prepare(request)
        body = answer.body if isinstance(answer.body, bytes) else b""
        await streamed.write(body[: len(body) // 2])
        log.info(
            "%s %s %s -> %s, answer streaming: %d of %d bytes sent (fault "
            "stream_after_commit)",
            request.method,
            request.path_qs,
            subject(request),
            answer.outcome,
            len(body) // 2,
            len(body),
        )
        await _hang(faults)
        return streamed
    if not (request.path.startswith(prefixes) or faults.take("hang_after_commit")):
        return answer
    log.info(
        "%s %s %s -> %s, answer withheld (fault hang_after_commit)",
        request.method,
        request.path_qs,
        subject(request),
        answer.outcome,
    )
    await _hang(faults)
    return answer


async def _hang(faults: Faults) -> None:
    """Far longer than any client waits; the server's shutdown cancels it."""
    task = asyncio.current_task()
    assert task is not None
    faults.withheld.add(task)
    try:
        await asyncio.sleep(HANG_SECONDS)
    finally:
        faults.withheld.discard(task)
