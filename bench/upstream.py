"""The upstream every configuration ends at: answers any request with a small JSON
charge, as cheaply as aiohttp allows, so the bench measures the proxies, not the target.

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


async def answer(request: web.Request) -> web.Response:
    await request.read()  # a real target reads the body before it answers
    # A slow call on request (bench/duplicates.py): the seconds the work takes.
    if delay := request.headers.get("X-Bench-Delay"):
        await asyncio.sleep(float(delay))
    return web.Response(body=CHARGE, content_type="application/json")


def build_app() -> web.Application:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    return app


def main() -> None:
    asyncio.run(serve(build_app()))


if __name__ == "__main__":
    main()
