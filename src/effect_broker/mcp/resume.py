"""A tool call's result delivered on a resumed stream, followed by the proxy itself.

Since 2025-11-25 an MCP server may close the SSE stream of a ``tools/call`` after an
event id (and a ``retry`` hint) and deliver the result later, on a GET to the same
endpoint that carries ``Last-Event-ID`` (SEP-1699, "polling"). The client that sent
the call is not the one reading the answer of a recorded call: the proxy is. So the
proxy reconnects as the revision tells a client to, waits the ``retry`` it was given,
reads until the response to the call's id, and records the streams joined as the one
answer. Every GET is a read: the call is never sent again. A server that gives no
answer within the contract's timeout leaves the call unknown, as before, with the
reason in the attempt.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import aiohttp

from effect_broker.engine import StoredRequest, StoredResponse
from effect_broker.mcp.jsonrpc import RequestId, ServerRequestWatch, is_sse

log = logging.getLogger("effect_broker.mcp")

# Headers of the call that a resumed GET does not carry: it has no body, asks for a
# stream, and is no tools/call (the routing headers name the POST's method).
_NOT_RESENT = frozenset(
    {
        "content-type",
        "content-length",
        "transfer-encoding",
        "accept",
        "last-event-id",
        "mcp-method",
        "mcp-name",
    }
)
# When the server names no retry interval: soon, but never a busy loop.
DEFAULT_RETRY_MS = 100
# A server's retry hint is honoured up to this; the contract's timeout still bounds all.
MAX_RETRY_MS = 5_000
# Reconnections that bring no new event before the proxy gives up (a server that
# closes an empty stream at once, over and over).
MAX_EMPTY_RESUMES = 50
# A GET answered thus says the stream cannot be resumed.
SEP_1699_PREFIX = "the MCP server closed the call's stream before its result"


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a client resumes an SSE stream: the last event id, the retry hint."""

    event_id: str | None = None
    retry_ms: int | None = None

    def after(self, events: bytes) -> Cursor:
        """This cursor moved past ``events`` (complete SSE events, as received)."""
        event_id, retry_ms = self.event_id, self.retry_ms
        for line in events.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n"):
            name, _, value = line.partition(b":")
            value = value.removeprefix(b" ")
            if name == b"id" and b"\0" not in value:
                event_id = value.decode("utf-8", errors="replace")
            elif name == b"retry" and value.isdigit():
                retry_ms = int(value)
        return Cursor(event_id, retry_ms)


def _watched(call_id: RequestId | None, body: bytes) -> ServerRequestWatch:
    watch = ServerRequestWatch(call_id)
    watch("text/event-stream", body if body.endswith(b"\n\n") else body + b"\n\n")
    return watch


def _content_type(response: StoredResponse) -> str | None:
    for name, value in response.headers:
        if name.lower() == "content-type":
            return value
    return None


def _resume_headers(request: StoredRequest, event_id: str) -> list[tuple[str, str]]:
    headers = [
        (name, value)
        for name, value in request.headers
        if name.lower() not in _NOT_RESENT
    ]
    headers += [("Accept", "text/event-stream"), ("Last-Event-ID", event_id)]
    return headers


async def follow_resumed(
    session: aiohttp.ClientSession,
    request: StoredRequest,
    response: StoredResponse,
    call_id: RequestId | None,
    *,
    within: float,
    max_body: int,
    server_request: str,
    on_progress: Callable[[bytes], None] | None = None,
) -> tuple[StoredResponse, str] | None:
    """The call's answer with what resumed GETs delivered appended, and a detail
    (empty once the response arrived); None when ``response`` needs no following: not
    an SSE stream, already answered, cut at a server request, or with no event id to
    resume from (a stream that simply ended: unknown, as the revision says).
    ``server_request`` begins the detail of a stream cut at a server request;
    progress notifications on the resumed streams go to ``on_progress``."""
    if response.status != 200 or not is_sse(_content_type(response)):
        return None
    body = response.body
    if _watched(call_id, body).answered:
        return None
    cursor = Cursor().after(body)
    if cursor.event_id is None:
        return None
    deadline = time.monotonic() + within
    joined = bytearray(body if body.endswith(b"\n\n") else body + b"\n\n")
    empty = 0
    while True:
        assert cursor.event_id is not None
        wait = min(cursor.retry_ms or DEFAULT_RETRY_MS, MAX_RETRY_MS) / 1000
        left = deadline - time.monotonic()
        if left <= wait:
            return _whole(response, joined), (
                f"{SEP_1699_PREFIX}, and no resumed stream delivered it within the "
                f"contract's timeout (last event id {cursor.event_id[:80]!r})"
            )
        # The revision has the client wait the retry interval before it reconnects.
        await asyncio.sleep(wait)
        try:
            async with asyncio.timeout(deadline - time.monotonic()):
                got, reason = await _resume_once(
                    session,
                    request,
                    cursor.event_id,
                    call_id,
                    max_body - len(joined),
                    server_request,
                    on_progress,
                )
        except TimeoutError:
            return _whole(response, joined), (
                f"{SEP_1699_PREFIX}, and the resumed stream did not deliver it within "
                "the contract's timeout"
            )
        except (aiohttp.ClientError, OSError) as exc:
            return _whole(response, joined), (
                f"{SEP_1699_PREFIX}, and resuming it failed: {exc!r}"
            )
        if reason is not None and got is None:
            return _whole(response, joined), f"{SEP_1699_PREFIX}; {reason}"
        assert got is not None
        joined += got if got.endswith(b"\n\n") or not got else got + b"\n\n"
        if reason is not None:  # the answer, or a cut the watch named
            return _whole(response, joined), reason
        moved = cursor.after(got)
        empty = empty + 1 if moved.event_id == cursor.event_id else 0
        if empty >= MAX_EMPTY_RESUMES:
            return _whole(response, joined), (
                f"{SEP_1699_PREFIX}, and {empty} resumed streams brought nothing new"
            )
        cursor = moved
        log.debug("MCP call %.80r: stream closed again, resuming", call_id)


async def _resume_once(
    session: aiohttp.ClientSession,
    request: StoredRequest,
    event_id: str,
    call_id: RequestId | None,
    limit: int,
    server_request: str,
    on_progress: Callable[[bytes], None] | None,
) -> tuple[bytes | None, str | None]:
    """One resumed GET: (its events, None) when it ended without the answer;
    (events, "") when the answer came; (events, reason) for a server request mid-call;
    (None, reason) when the server would not resume."""
    async with session.get(
        request.url,
        headers=_resume_headers(request, event_id),
        allow_redirects=False,
        timeout=aiohttp.ClientTimeout(total=None, connect=10, sock_read=None),
    ) as resumed:
        content_type = resumed.headers.get("Content-Type")
        if resumed.status != 200 or not is_sse(content_type):
            return None, (
                f"the resumed GET was answered {resumed.status} "
                f"{(content_type or 'with no content type')[:60]}"
            )
        watch = ServerRequestWatch(call_id, on_progress)
        got = bytearray()
        async for chunk in resumed.content.iter_any():
            got += chunk
            if len(got) > limit:
                return bytes(got[:limit]), "the resumed stream is longer than a receipt"
            method = watch(content_type, chunk)
            if method is not None:
                return bytes(got), server_request + method[:80]
            if watch.answered:
                return bytes(got), ""
        return bytes(got), None


def _whole(response: StoredResponse, joined: bytearray) -> StoredResponse:
    return replace(response, body=bytes(joined))
