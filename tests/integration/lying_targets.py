"""Targets that break their contracts on purpose, for ``contracts verify`` to catch.

Each is a small aiohttp app with one charge endpoint (``POST /v1/charges``) and, where
its class has one, a lookup (``GET /v1/charges?correlation_id=``):

- ``ignores_key``: claims idempotency, makes a new charge for every request;
- ``expires_early``: deduplicates, but forgets a key after ``forget_after`` seconds;
- ``lagging_lookup``: reconcilable, but its lookup shows a charge only ``lag`` seconds
  after the commit, longer than the contract's settlement_bound;
- ``kit_ignores_tombstones``: speaks the target kit's protocol, but commits an attempt
  that arrives after its key was tombstoned (no shared unique row).

and one honest API in another shape: ``stripe_shaped``, which answers like Stripe's
``POST /v1/payment_intents`` (form bodies, a secret key, replays with
``Idempotent-Replayed``, 400 ``idempotency_error`` in Stripe's error envelope).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from effect_broker.target.protocol import (
    ATTEMPT_KEY_HEADER,
    SECRET_HEADER,
    TOMBSTONE_SUFFIX,
    WELL_KNOWN_PREFIX,
    AttemptReport,
    AttemptState,
    StoredAnswer,
)

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


def kit_ignores_tombstones(secret: str) -> web.Application:
    committed: dict[str, StoredAnswer] = {}
    tombstoned: set[str] = set()

    def report(key: str, state: AttemptState, status: int) -> web.Response:
        answer = committed.get(key) if state is AttemptState.COMMITTED else None
        document = AttemptReport(key, state, "2026-01-01T00:00:00Z", answer).to_json()
        return web.json_response(document, status=status)

    async def post(request: web.Request) -> web.Response:
        await request.read()
        key = request.headers[ATTEMPT_KEY_HEADER]
        charge = _charge(key)  # the lie: a tombstone does not stop this commit
        committed[key] = StoredAnswer(201, {}, json.dumps(charge).encode())
        return web.json_response(charge, status=201)

    def authorised(request: web.Request) -> bool:
        return request.headers.get(SECRET_HEADER) == secret

    async def lookup(request: web.Request) -> web.Response:
        key = request.match_info["key"]
        if not authorised(request):
            return web.json_response({"error": "forbidden"}, status=403)
        if key in committed:
            return report(key, AttemptState.COMMITTED, 200)
        if key in tombstoned:
            return report(key, AttemptState.TOMBSTONED, 200)
        return report(key, AttemptState.ABSENT, 404)

    async def tombstone(request: web.Request) -> web.Response:
        key = request.match_info["key"]
        if not authorised(request):
            return web.json_response({"error": "forbidden"}, status=403)
        if key in committed:
            return report(key, AttemptState.COMMITTED, 409)
        status = 200 if key in tombstoned else 201
        tombstoned.add(key)
        return report(key, AttemptState.TOMBSTONED, status)

    app = web.Application()
    app.router.add_post("/v1/charges", post)
    app.router.add_get(WELL_KNOWN_PREFIX + "{key}", lookup)
    app.router.add_put(WELL_KNOWN_PREFIX + "{key}" + TOMBSTONE_SUFFIX, tombstone)
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
