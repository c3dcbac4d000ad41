"""The baseline: a minimal aiohttp forward proxy with no database.

Same shape as effect-broker's forward mode: an aiohttp server taking absolute-form
requests (``POST http://host:port/path``), forwarding each with one shared keep-alive
``ClientSession`` configured like effect-broker's upstream client, reading the whole
answer and returning it. No ledger, no hashing, no encryption: what effect-broker adds
is measured against this. It runs on the event loop ``effect-broker serve`` runs on
(uvloop where installed, ``EFFECT_BROKER_EVENT_LOOP`` honoured): on asyncio's own loop
it made 8-11 % fewer requests per second here, which the ratios would have counted as
effect-broker's gain.

Run alone: ``python -m bench.bare_proxy`` (prints ``listening on http://127.0.0.1:PORT``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from yarl import URL

from bench.serving import serve
from effect_broker.cli.serve import run_on_fastest_loop

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length"}
SESSION = web.AppKey("session", aiohttp.ClientSession)


async def forward(request: web.Request) -> web.StreamResponse:
    if not request.raw_path.startswith("http://"):
        return web.Response(status=400, text="send absolute-form http:// requests\n")
    body = await request.read()
    headers = [
        (k, v) for k, v in request.headers.items() if k.lower() not in _NOT_FORWARDED
    ]
    async with request.app[SESSION].request(
        request.method,
        URL(request.raw_path, encoded=True),
        headers=headers,
        data=body or None,
        allow_redirects=False,
    ) as upstream:
        payload = await upstream.read()
        out = web.Response(status=upstream.status, reason=upstream.reason, body=payload)
        for name, value in upstream.headers.items():
            if name.lower() not in _NOT_FORWARDED:
                out.headers.add(name, value)
        return out


async def client(app: web.Application) -> AsyncIterator[None]:
    """The same client settings as effect-broker's ``proxy.upstream.client_session``."""
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=100, ttl_dns_cache=60),
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
        skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept", "Content-Type"),
    ) as session:
        app[SESSION] = session
        yield


def build_app() -> web.Application:
    app = web.Application()
    app.cleanup_ctx.append(client)
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


def main() -> None:
    run_on_fastest_loop(serve(build_app()))


if __name__ == "__main__":
    main()
