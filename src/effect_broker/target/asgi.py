"""The kit's endpoints as ASGI middleware (Starlette, FastAPI, or any ASGI app).

Plain ASGI, so it needs no framework at all::

    app = KitMiddleware(app, PsycopgBackend(pool.connection), secret=secret)
    # Starlette/FastAPI: middleware=[Middleware(KitMiddleware, backend=b, secret=s)]

Requests under the well-known prefix are answered here; everything else goes to the
application untouched. At lifespan startup the middleware checks the kit's table *after*
the application's own startup (where it usually opens its pool) and turns a missing
table into ``lifespan.startup.failed`` with a message saying how to create it, so the
server refuses to start. Without a lifespan (some test transports) the endpoints still
answer 503 with the same message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from effect_broker.target.endpoints import Backend, Endpoints, owns
from effect_broker.target.outcomes import KitNotInstalled

Message = MutableMapping[str, Any]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_SECRET = b"effect-broker-secret"


class KitMiddleware:
    def __init__(self, app: ASGIApp, backend: Backend, *, secret: str) -> None:
        self.app = app
        self.backend = backend
        self.endpoints = Endpoints(backend, secret)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and owns(scope["path"]):
            await self._serve(scope, send)
        elif scope["type"] == "lifespan":
            await self.app(scope, receive, self._checking(send))
        else:
            await self.app(scope, receive, send)

    async def _serve(self, scope: Scope, send: Send) -> None:
        presented = next(
            (v.decode("latin-1") for k, v in scope["headers"] if k.lower() == _SECRET),
            None,
        )
        reply = await self.endpoints.handle(scope["method"], scope["path"], presented)
        headers = [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in reply.headers.items()
        ]
        headers.append((b"content-length", str(len(reply.body)).encode()))
        await send(
            {"type": "http.response.start", "status": reply.status, "headers": headers}
        )
        await send({"type": "http.response.body", "body": reply.body})

    def _checking(self, send: Send) -> Send:
        """``send`` with the table check slipped in before startup is reported done."""

        async def checked(message: Message) -> None:
            if message["type"] == "lifespan.startup.complete":
                try:
                    await self.backend.check_installed()
                except KitNotInstalled as exc:
                    message = {"type": "lifespan.startup.failed", "message": str(exc)}
            await send(message)

        return checked
