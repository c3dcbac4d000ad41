"""The admin application, served on its own port next to the proxy."""

from __future__ import annotations

from aiohttp import web

from effect_broker.errors import EffectBrokerError
from effect_broker.proxy.state import PROXY_STATE, ProxyState


async def healthz(request: web.Request) -> web.Response:
    """Alive: the process answers. Says nothing about the database on purpose."""
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Ready: the ledger answers and its schema is the one this build expects."""
    store = request.app[PROXY_STATE].store
    try:
        await store.ping()
        pending = await store.pending_migrations()
    except EffectBrokerError as exc:
        return web.json_response(
            {"status": "unavailable", "detail": exc.message}, status=503
        )
    if pending:
        return web.json_response(
            {"status": "migrations pending", "pending": [m.label for m in pending]},
            status=503,
        )
    return web.json_response({"status": "ready"})


def build_admin_app(state: ProxyState) -> web.Application:
    app = web.Application()
    app[PROXY_STATE] = state
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app
