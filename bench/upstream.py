"""The upstream every configuration ends at: answers any request with a small JSON
charge, as cheaply as aiohttp allows, so the bench measures the proxies, not the target.
A path ending in ``/stream`` gets an SSE stream of ``STREAM_EVENTS`` events instead,
``EVENT_GAP`` seconds apart, the first at once, and one ending in ``/bigstream`` a
chunked body of ``BIG_STREAM_BYTES`` in ``BIG_CHUNK`` pieces ``BIG_GAP`` apart
(``bench.streams``).

Run alone: ``python -m bench.upstream`` (prints ``listening on http://127.0.0.1:PORT``).
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from bench.serving import serve

CHARGE = json.dumps(
    {
        "id": "ch_bench",
        "object": "charge",
        "status": "succeeded",
        "amount": 1,
        "currency": "usd",
    }
).encode()


STREAM_EVENTS = 20
EVENT_GAP = 0.005
BIG_STREAM_BYTES = 1024 * 1024
BIG_CHUNK = 16 * 1024
BIG_GAP = 0.03  # 64 chunks: about 2 s a stream, so hundreds of them overlap


async def answer(request: web.Request) -> web.StreamResponse:
    await request.read()  # a real target reads the body before it answers
    # A slow call on request (bench/duplicates.py): the seconds the work takes.
    if delay := request.headers.get("X-Bench-Delay"):
        await asyncio.sleep(float(delay))
    if request.path.endswith("/stream"):
        return await stream(request)
    if request.path.endswith("/bigstream"):
        return await big_stream(request)
    return web.Response(body=CHARGE, content_type="application/json")


async def stream(request: web.Request) -> web.StreamResponse:
    """An LLM-style SSE answer: no Content-Length, events as they are "generated"."""
    out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await out.prepare(request)
    for number in range(STREAM_EVENTS):
        if number:
            await asyncio.sleep(EVENT_GAP)
        await out.write(f'id: {number}\ndata: {{"token": {number}}}\n\n'.encode())
    await out.write_eof()
    return out


async def big_stream(request: web.Request) -> web.StreamResponse:
    """A long chunked answer of unknown length (a large tool result, a file)."""
    out = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
    await out.prepare(request)
    chunk = b"x" * BIG_CHUNK
    for number in range(BIG_STREAM_BYTES // BIG_CHUNK):
        if number:
            await asyncio.sleep(BIG_GAP)
        await out.write(chunk)
    await out.write_eof()
    return out


def build_app() -> web.Application:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    return app


def main() -> None:
    asyncio.run(serve(build_app()))


if __name__ == "__main__":
    main()
