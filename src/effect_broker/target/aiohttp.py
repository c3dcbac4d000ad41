"""The kit's endpoints on an aiohttp application.

``setup(app, backend, secret=...)`` adds one catch-all route under the well-known
prefix (so the rest of the application pays nothing per request) and a startup check:
an application whose table is missing refuses to start, with a message saying how to
create it, instead of failing the proxy's first tombstone much later.
"""

from __future__ import annotations

from aiohttp import web

from effect_broker.target.endpoints import Backend, Endpoints
from effect_broker.target.protocol import SECRET_HEADER, WELL_KNOWN_PREFIX


def setup(app: web.Application, backend: Backend, *, secret: str) -> None:
    """Serve lookup and tombstone on ``app``; check the kit's table at startup.

    The check runs in ``on_startup``, after any ``cleanup_ctx`` (where applications
    usually open their pool), so ``backend`` may acquire from a pool made there.
    """
    endpoints = Endpoints(backend, secret)

    async def handle(request: web.Request) -> web.Response:
        reply = await endpoints.handle(
            request.method, request.path, request.headers.get(SECRET_HEADER)
        )
        return web.Response(status=reply.status, headers=reply.headers, body=reply.body)

    async def check(_app: web.Application) -> None:
        await backend.check_installed()

    app.router.add_route("*", WELL_KNOWN_PREFIX + "{tail:.*}", handle)
    app.on_startup.append(check)
