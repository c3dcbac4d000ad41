"""A fake streaming target for the recorded-stream tests: SSE the way OpenAI-style and
Anthropic-style APIs send it, and a plain stream of numbered events, each answer held
at a gate after its first event so a test can prove the first event arrived alone."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.integration.harness import serve_handler

STREAM_ROUTES = """\
version: 1
proxy:
  operation_key_header: Operation-Key
contracts:
  - name: tool.stream
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 1h
    timeout: {timeout}
    stream_idle_timeout: {idle}
    lease_grace: {grace}
routes:
{routes}"""

# route name -> (path at the target, reverse prefix)
PATHS = {
    "events": "/v1/events",
    "openai": "/v1/chat/completions",
    "anthropic": "/v1/messages",
}
FORWARD_HOST = "sse.internal"


def stream_routes(
    upstream: str, *, timeout: str = "2s", idle: str = "2s", grace: str = "1s"
) -> str:
    """Reverse routes under /<name>/..., forward routes on sse.internal."""
    routes = []
    for name, path in PATHS.items():
        routes.append(
            f"  - name: {name}-reverse\n"
            f"    match: {{method: POST, path: /{name}{path}}}\n"
            f"    strip_prefix: /{name}\n"
            f"    upstream: {upstream}\n"
            "    contract: tool.stream\n"
            f"  - name: {name}-forward\n"
            f"    match: {{method: POST, host: {FORWARD_HOST}, path: {path}}}\n"
            f"    upstream: {upstream}\n"
            "    contract: tool.stream\n"
        )
    return STREAM_ROUTES.format(
        timeout=timeout, idle=idle, grace=grace, routes="".join(routes)
    )


def openai_events(n: int) -> list[bytes]:
    chunks = [
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "fake",
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": f"w{i} "},
                    "finish_reason": None if i < n - 1 else "stop",
                }
            ],
        }
        for i in range(n)
    ]
    return [f"data: {json.dumps(c)}\n\n".encode() for c in chunks] + [b"data: [DONE]\n\n"]


def anthropic_events(n: int) -> list[bytes]:
    def event(kind: str, data: dict[str, Any]) -> bytes:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()

    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "fake",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 0},
    }
    return [
        event("message_start", {"message": message}),
        event(
            "content_block_start",
            {"index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        *(
            event(
                "content_block_delta",
                {"index": 0, "delta": {"type": "text_delta", "text": f"w{i} "}},
            )
            for i in range(n)
        ),
        event("content_block_stop", {"index": 0}),
        event(
            "message_delta",
            {
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": n},
            },
        ),
        event("message_stop", {}),
    ]


def plain_events(n: int) -> list[bytes]:
    return [f"id: {i}\ndata: event {i}\n\n".encode() for i in range(n)]


@dataclass
class StreamTarget:
    """Answers every POST with an SSE stream; holds each stream after its first event
    until ``gate`` is set (sending a comment every ``heartbeat`` seconds meanwhile, if
    set), and after that stalls until the end of the test when ``stall`` is set."""

    events: int = 5
    hits: int = 0
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    stall: bool = False
    heartbeat: float | None = None  # send an SSE comment this often until the gate
    first_sent_at: float | None = None
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    url: str = ""

    def body_for(self, path: str) -> list[bytes]:
        if path.endswith("/chat/completions"):
            return openai_events(self.events)
        if path.endswith("/messages"):
            return anthropic_events(self.events)
        return plain_events(self.events)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.hits += 1
        await request.read()
        events = self.body_for(request.path)
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(events[0])
        self.first_sent_at = time.perf_counter()
        while self.heartbeat is not None and not self.gate.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.gate.wait(), self.heartbeat)
            if not self.gate.is_set():
                await out.write(b": still working\n\n")
        await self.gate.wait()
        if self.stall:
            await self.closing.wait()  # the proxy's idle timeout must end it first
            return out
        for event in events[1:]:
            await out.write(event)
        await out.write_eof()
        self.finished.set()
        return out


@asynccontextmanager
async def stream_target(events: int = 5) -> AsyncIterator[StreamTarget]:
    target = StreamTarget(events=events)
    async with serve_handler(target.handle) as url:
        target.url = url
        try:
            yield target
        finally:
            target.gate.set()
            target.closing.set()
