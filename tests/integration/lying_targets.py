"""Targets that break their contracts on purpose, for ``contracts verify`` to catch.

Each is a small aiohttp app with one charge endpoint (``POST /v1/charges``) and, where
its class has one, a lookup (``GET /v1/charges?correlation_id=``):

- ``ignores_key``: claims idempotency, makes a new charge for every request;
- ``expires_early``: deduplicates, but forgets a key after ``forget_after`` seconds;
- ``lagging_lookup``: reconcilable, but its lookup shows a charge only ``lag`` seconds
  after the commit, longer than the contract's settlement_bound.

and one honest API in another shape: ``stripe_shaped``, which answers like Stripe's
``POST /v1/payment_intents`` (form bodies, a secret key, replays with
``Idempotent-Replayed``, 400 ``idempotency_error`` in Stripe's error envelope).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

_ids = itertools.count(1)


def _charge(request_key: str | None) -> dict[str, object]:
    return {"id": f"ch_{next(_ids)}", "key": request_key, "status": "succeeded"}


def ignores_key() -> web.Application:
    async def post(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(
            _charge(request.headers.get("Idempotency-Key")), status=201
        )

    app = web.Application()
    app.router.add_post("/v1/charges", post)
    return app


def expires_early(forget_after: float) -> web.Application:
    seen: dict[str, tuple[float, bytes, dict[str, object]]] = {}

    async def post(request: web.Request) -> web.Response:
        key = request.headers["Idempotency-Key"]
        body = await request.read()
        kept = seen.get(key)
        if kept and time.monotonic() - kept[0] < forget_after:
            if kept[1] != body:
                return web.json_response({"error": "key reused"}, status=422)
            return web.json_response(kept[2], status=201)
        charge = _charge(key)
        seen[key] = (time.monotonic(), body, charge)
        return web.json_response(charge, status=201)

    app = web.Application()
    app.router.add_post("/v1/charges", post)
    return app


def lagging_lookup(lag: float) -> web.Application:
    committed: dict[str, tuple[float, dict[str, object]]] = {}

    async def post(request: web.Request) -> web.Response:
        await request.read()
        correlation = request.headers["X-Correlation-Id"]
        charge = _charge(correlation)
        committed[correlation] = (time.monotonic(), charge)
        return web.json_response(charge, status=201)

    async def get(request: web.Request) -> web.Response:
        found = committed.get(request.query.get("correlation_id", ""))
        if found is None or time.monotonic() - found[0] < lag:
            return web.json_response({"error": "not found"}, status=404)
        return web.json_response(found[1])

    app = web.Application()
    app.router.add_post("/v1/charges", post)
    app.router.add_get("/v1/charges", get)
    return app


def stripe_shaped(seen: list[dict[str, Any]]) -> web.Application:
    """Records each request (headers and form) in ``seen``."""
    kept: dict[str, tuple[dict[str, str], dict[str, object]]] = {}

    def error(status: int, kind: str, message: str) -> web.Response:
        return web.json_response(
            {"error": {"type": kind, "message": message}}, status=status
        )

    async def post(request: web.Request) -> web.Response:
        form = {k: v for k, v in (await request.post()).items() if isinstance(v, str)}
        seen.append({"headers": dict(request.headers), "form": form})
        if not request.headers.get("Authorization", "").startswith("Bearer sk_test_"):
            return error(401, "invalid_request_error", "Invalid API Key provided")
        key = request.headers.get("Idempotency-Key")
        if key and key in kept:
            params, intent = kept[key]
            if params != form:
                return error(
                    400,
                    "idempotency_error",
                    "Keys for idempotent requests can only be used with the same "
                    "parameters they were first used with.",
                )
            return web.json_response(intent, headers={"Idempotent-Replayed": "true"})
        intent = {
            "id": f"pi_{next(_ids)}",
            "object": "payment_intent",
            "amount": int(form["amount"]),
            "currency": form["currency"],
            "status": "requires_payment_method",
        }
        if key:
            kept[key] = (form, intent)
        return web.json_response(intent)

    app = web.Application()
    app.router.add_post("/v1/payment_intents", post)
    return app


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """``app`` on a free local port; yields its base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()
