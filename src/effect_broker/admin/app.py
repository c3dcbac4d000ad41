"""The admin application, served on its own port next to the proxy.

Open: ``/healthz``, ``/readyz``, ``/metrics`` and ``/openapi.json``. Everything under
``/v1`` needs a bearer token that decides the tenant (see ``admin.auth``); an effect of
another tenant is answered exactly like one that does not exist. Every error is RFC 9457
problem+json with a stable ``type``.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, SecretStr

from effect_broker.admin.auth import ADMIN_TOKEN, TENANT, configured_token, require_token
from effect_broker.admin.console import add_console
from effect_broker.admin.openapi import openapi_document
from effect_broker.admin.redaction import shown_request
from effect_broker.admin.schemas import Health, Readiness
from effect_broker.admin.state import ADMIN_STATE, AdminState
from effect_broker.admin.validation import (
    NoSuchEvent,
    parse_effect_id,
    parse_inspect_query,
    parse_list_query,
    parse_resolution_body,
)
from effect_broker.admin.views import (
    decode_cursor,
    effect_detail_view,
    effect_view,
    list_filter,
    page_view,
    receipt_view,
)
from effect_broker.answers import Answer, as_response, failure_answer
from effect_broker.engine import open_receipt
from effect_broker.errors import (
    EffectBrokerError,
    EffectNotFound,
    MethodNotAllowed,
    NoReceipt,
    RouteNotFound,
    StoreUnavailable,
)
from effect_broker.history import fold_events
from effect_broker.models import Effect
from effect_broker.ratelimited_log import RateLimitedLog

log = logging.getLogger("effect_broker.admin")
quiet = RateLimitedLog(log)
UNEXPECTED = "the admin API failed; the broker's log has the cause"


def _json(body: BaseModel, *, status: int = 200) -> web.Response:
    """A response model as JSON: the only way a handler builds a body."""
    document: Any = body.model_dump(mode="json")
    return web.json_response(document, status=status)


# -- probes and metrics (open) --------------------------------------------------------


async def healthz(request: web.Request) -> web.Response:
    """Alive: the process answers. Says nothing about the database on purpose."""
    return _json(Health())


async def readyz(request: web.Request) -> web.Response:
    """Ready: the ledger answers and its schema is the one this build expects."""
    store = request.app[ADMIN_STATE].store
    try:
        await store.ping()
        pending = await store.pending_migrations()
    except EffectBrokerError as exc:
        if isinstance(exc, StoreUnavailable):
            request.app[ADMIN_STATE].metrics.store_unavailable.labels("admin").inc()
        return _json(Readiness(status="unavailable", detail=exc.message), status=503)
    if pending:
        return _json(
            Readiness(status="migrations pending", pending=[m.label for m in pending]),
            status=503,
        )
    return _json(Readiness(status="ready"))


async def refresh_unknown_gauges(state: AdminState) -> None:
    """Set the unknown-effect gauges from the ledger, the only authority on them.

    Series seen before are set to 0 first, so a route whose last unknown effect was
    resolved reads 0 (and an alert on it clears) instead of keeping its last value.
    """
    summary = await state.store.unknown_summary()
    now = datetime.now(UTC)
    metrics = state.metrics
    for gauge in (metrics.unknown, metrics.oldest_unknown):
        # Under workers, series another worker set count too: the zero written here
        # is the most recent value, so the merged gauge reads 0 as well.
        for labels in list(metrics.series(gauge)):
            gauge.labels(**labels).set(0)
    oldest: dict[str, float] = {}
    for route, status, count, since in summary:
        metrics.unknown.labels(route, status.value).set(count)
        age = max((now - since).total_seconds(), 0.0)
        oldest[route] = max(oldest.get(route, 0.0), age)
    for route, age in oldest.items():
        metrics.oldest_unknown.labels(route).set(age)


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text; open because it carries routes and counts, never tenants.

    Served even when the ledger cannot be read: the counters, and the count of
    store-unavailable answers this outage adds, are what an alert needs most then. The
    unknown-effect gauges keep their last values until the ledger answers again.
    """
    state = request.app[ADMIN_STATE]
    try:
        await refresh_unknown_gauges(state)
    except StoreUnavailable as exc:
        log.warning("metrics: unknown-effect gauges not refreshed: %s", exc.message)
        state.metrics.store_unavailable.labels("admin").inc()
    return web.Response(
        body=state.metrics.exposition(),
        headers={"Content-Type": CONTENT_TYPE_LATEST},
    )


async def openapi(request: web.Request) -> web.Response:
    """The document generated from the same models the handlers answer with."""
    return web.json_response(openapi_document())


# -- /v1 (bearer token; the token decides the tenant) ----------------------------------


async def _load(request: web.Request) -> Effect:
    effect_id = parse_effect_id(request.match_info["effect_id"])
    try:
        return await request.app[ADMIN_STATE].store.get(request[TENANT], effect_id)
    except EffectNotFound:
        raise EffectNotFound(f"no effect {effect_id} for this tenant") from None


def _actor(request: web.Request) -> str:
    return f"operator:{request[TENANT]}"


async def list_effects(request: web.Request) -> web.Response:
    query = parse_list_query(request.query)
    page = await request.app[ADMIN_STATE].store.list_effects(
        request[TENANT],
        list_filter(query, datetime.now(UTC)),
        cursor=decode_cursor(query.cursor) if query.cursor else None,
        limit=query.limit,
    )
    return _json(page_view(page.effects, page.next_cursor))


async def get_effect(request: web.Request) -> web.Response:
    """The effect, its event history (optionally folded at a sequence) and attempts."""
    at_sequence = parse_inspect_query(request.query).at_sequence
    effect = await _load(request)
    store, tenant = request.app[ADMIN_STATE].store, request[TENANT]
    events, attempts, first_bad = await asyncio.gather(
        store.events(tenant, effect.effect_id),
        store.attempts(tenant, effect.effect_id),
        store.verify_events(tenant, effect.effect_id),
    )
    folded = None
    if at_sequence is not None:
        if at_sequence > len(events):
            # A well-formed number this effect has no event for: like an unknown id.
            raise NoSuchEvent(
                "at_sequence",
                f"is {at_sequence}, but effect {effect.effect_id} has events 1 to "
                f"{len(events)}",
            )
        folded = fold_events(events, at_sequence)
    view = effect_detail_view(
        effect,
        events,
        attempts,
        chain_intact=first_bad is None,
        at_sequence=folded,
        request=shown_request(request.app[ADMIN_STATE], effect),
    )
    return _json(view)


async def get_receipt(request: web.Request) -> web.Response:
    """The stored answer, decrypted for its own tenant; 404 until the effect settles."""
    effect = await _load(request)
    state = request.app[ADMIN_STATE]
    receipt = await state.store.receipt(request[TENANT], effect.effect_id)
    if receipt is None:
        raise NoReceipt(
            f"effect {effect.effect_id} is {effect.status}; only a settled effect "
            "(succeeded or failed_final) has a receipt"
        )
    answer = open_receipt(state.keyring, receipt, effect)
    return _json(receipt_view(receipt, answer))


async def post_reconcile(request: web.Request) -> web.Response:
    effect = await _load(request)
    engine = request.app[ADMIN_STATE].engine
    updated = await engine.reconcile_now(effect, actor=_actor(request))
    return _json(effect_view(updated), status=202)


async def post_resolve(request: web.Request) -> web.Response:
    """Validated before the effect is loaded: a malformed request changes nothing."""
    resolution = parse_resolution_body(await request.read())
    effect = await _load(request)
    engine = request.app[ADMIN_STATE].engine
    updated = await engine.resolve(effect, resolution, actor=_actor(request))
    return _json(effect_view(updated))


# -- the application --------------------------------------------------------------------


def _router_answer(request: web.Request, exc: web.HTTPException) -> Answer | None:
    """The admin router's own refusals (no such route, another method), in the same
    problem+json shape as everything else; the rest is ``failure_answer``'s."""
    if exc.status == 404:
        return Answer(RouteNotFound(f"no admin route {request.path}"))
    if exc.status == 405:
        allow = exc.headers.get("Allow", "")
        return Answer(
            MethodNotAllowed(f"{request.path} takes {allow or 'other methods'}"),
            headers={"Allow": allow},
        )
    return None


@web.middleware
async def problems(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error becomes problem+json here; no stack trace reaches a client."""
    try:
        return await handler(request)
    except Exception as exc:
        answer = (
            _router_answer(request, exc) if isinstance(exc, web.HTTPException) else None
        ) or failure_answer(exc, unexpected=UNEXPECTED)
        if answer is None:
            raise
        if not isinstance(exc, EffectBrokerError | web.HTTPException):
            log.exception("%s %s failed", request.method, request.path)
        elif isinstance(exc, EffectBrokerError) and exc.status >= 500:
            # A ledger outage fails every call (and every readiness probe) alike.
            quiet.error(
                f"failed:{type(exc).__name__}",
                "%s %s failed: %s",
                request.method,
                request.path,
                exc.message,
            )
        return as_response(answer)


def build_admin_app(
    state: AdminState,
    *,
    admin_token: SecretStr | str | None = None,
    trace_url: str | None = None,
) -> web.Application:
    """The admin app for ``state``; ``admin_token`` unlocks ``/v1`` in sidecar mode.

    Without a token a sidecar's ``/v1`` answers 401 with how to set one: an admin API
    that settles effects by hand must never be open by default. The operator console
    (``/console``) logs in with the same token; ``trace_url`` (with ``{trace_id}``)
    links each effect to the trace UI.
    """
    app = web.Application(middlewares=[problems, require_token])
    app[ADMIN_STATE] = state
    token = configured_token(admin_token)
    if token is not None:
        app[ADMIN_TOKEN] = token
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/openapi.json", openapi)
    app.router.add_get("/v1/effects", list_effects)
    app.router.add_get("/v1/effects/{effect_id}", get_effect)
    app.router.add_get("/v1/effects/{effect_id}/receipt", get_receipt)
    app.router.add_post("/v1/effects/{effect_id}/reconcile", post_reconcile)
    app.router.add_post("/v1/effects/{effect_id}/resolve", post_resolve)
    add_console(app, admin_token=token, trace_url=trace_url)
    return app
