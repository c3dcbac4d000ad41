"""The demo target's HTTP side: one aiohttp handler per mode, and fault injection.

Every handler validates the body, writes through ``ChargeStore`` (in a worker thread,
so concurrent requests really race in SQLite) and only then answers, unless a fault
says to lose that answer: the case that makes naive retries double-charge. The
transactional mode, present only with a PostgreSQL database, writes through
``PgChargeStore`` and serves the target kit's lookup and tombstone endpoints.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

from aiohttp import web

from effect_broker.demo.payment_target.charges import (
    ChargeRequest,
    ChargeStore,
    Drifted,
    InvalidCharge,
    Replayed,
    encode,
    parse_charge,
)
from effect_broker.demo.payment_target.delivery import deliver
from effect_broker.demo.payment_target.faults import Faults
from effect_broker.demo.payment_target.pg_charges import PgChargeStore
from effect_broker.demo.payment_target.state import (
    CORRELATION_HEADER,
    FAULTS,
    IDEMPOTENCY_HEADER,
    POSTGRES,
    REPLAYED_HEADER,
    SETTINGS,
    STORE,
    Answer,
    Postgres,
    Settings,
    error,
    subject,
)
from effect_broker.target import ATTEMPT_KEY_HEADER, MalformedAttemptKey, read_attempt_key
from effect_broker.target import aiohttp as kit_aiohttp
from effect_broker.target.asyncpg import AsyncpgBackend

log = logging.getLogger("payment_target")

# --------------------------------------------------------------------------- handlers


@web.middleware
async def log_requests(
    request: web.Request,
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> web.StreamResponse:
    """One stderr line per request: method, path, key or correlation id, outcome."""
    line = f"{request.method} {request.path_qs} {subject(request)}"
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        log.info("%s -> %s %s", line, exc.status, exc.reason)
        raise
    except Exception as exc:
        log.info("%s -> 500 %s", line, type(exc).__name__)
        raise
    log.info("%s -> %s %s", line, response.status, getattr(response, "outcome", ""))
    return response


async def _read_charge(request: web.Request) -> ChargeRequest | Answer:
    """The validated body, or the answer to give instead (an injected 503 or a 400)."""
    if request.app[FAULTS].take("fail_before_commit"):
        return Answer(
            503,
            encode({"error": "unavailable"}),
            "unavailable (fault fail_before_commit, nothing written)",
        )
    try:
        return parse_charge(await request.read())
    except InvalidCharge as exc:
        return error(400, f"invalid charge: {exc}")


async def post_idempotent(request: web.Request) -> web.StreamResponse:
    """Charge once per ``Idempotency-Key``: replay on repeat, 422 on payload drift."""
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if not key:
        return error(400, f"missing {IDEMPOTENCY_HEADER} header")
    charge = await _read_charge(request)
    if isinstance(charge, Answer):
        return charge
    retention = request.app[SETTINGS].key_retention
    result = await asyncio.to_thread(
        request.app[STORE].charge_once, key, charge, key_retention=retention
    )
    if isinstance(result, Drifted):
        return error(422, f"{IDEMPOTENCY_HEADER} was already used with another payload")
    if isinstance(result, Replayed):
        answer = Answer(
            result.status,
            result.body,
            f"replayed {result.charge_id}",
            headers={REPLAYED_HEADER: "true"},
        )
    else:
        answer = Answer(201, result.body, f"created {result.charge_id}")
    return await deliver(request, answer)


async def post_reconcilable(request: web.Request) -> web.StreamResponse:
    """Always charge, recording ``X-Correlation-Id`` so the charge can be looked up."""
    correlation_id = request.headers.get(CORRELATION_HEADER)
    if not correlation_id:
        return error(400, f"missing {CORRELATION_HEADER} header")
    charge = await _read_charge(request)
    if isinstance(charge, Answer):
        return charge
    created = await asyncio.to_thread(
        request.app[STORE].charge, "reconcilable", charge, correlation_id=correlation_id
    )
    answer = Answer(201, created.body, f"created {created.charge_id}")
    return await deliver(request, answer)


async def get_reconcilable(request: web.Request) -> Answer:
    """Look a charge up by correlation id; only settled charges are visible.

    A 404 therefore means "not committed" only once ``--settlement-delay`` has passed
    since the request could have been committed; before that it proves nothing.
    """
    correlation_id = request.query.get("correlation_id")
    if not correlation_id:
        return error(400, "missing correlation_id query parameter")
    settled_before = time.time() - request.app[SETTINGS].settlement_delay
    found = await asyncio.to_thread(
        request.app[STORE].find_settled, correlation_id, settled_before=settled_before
    )
    if found is None:
        return error(404, "not found")
    return Answer(200, found, "found")


async def post_unsafe(request: web.Request) -> web.StreamResponse:
    """Always charge; there is no key and no way to ask afterwards what happened."""
    charge = await _read_charge(request)
    if isinstance(charge, Answer):
        return charge
    created = await asyncio.to_thread(request.app[STORE].charge, "unsafe", charge)
    answer = Answer(201, created.body, f"created {created.charge_id}")
    return await deliver(request, answer)


async def post_transactional(request: web.Request) -> web.StreamResponse:
    """Charge and store the receipt for ``Effect-Attempt-Key`` in one transaction."""
    try:
        attempt_key = read_attempt_key(request.headers)
    except MalformedAttemptKey as exc:
        return error(400, str(exc))
    if attempt_key is None:
        return error(400, f"missing {ATTEMPT_KEY_HEADER} header")
    charge = await _read_charge(request)
    if isinstance(charge, Answer):
        return charge
    store = request.app[POSTGRES].store
    outcome, stored = await store.charge(attempt_key, charge, request.app[FAULTS])
    headers = dict(stored.headers)
    content_type = headers.pop("Content-Type", "application/json")
    answer = Answer(stored.status, stored.body, outcome, headers, content_type)
    return await deliver(request, answer)


async def list_charges(request: web.Request) -> Answer:
    order_id = request.query.get("order_id")
    rows = await asyncio.to_thread(request.app[STORE].list_charges, order_id)
    if POSTGRES in request.app:
        rows += await request.app[POSTGRES].store.list_charges(order_id)
    return Answer(200, encode(rows), f"{len(rows)} charges")


async def count_charges(request: web.Request) -> Answer:
    order_id = request.query.get("order_id")
    n = await asyncio.to_thread(request.app[STORE].count, order_id)
    if POSTGRES in request.app:
        n += await request.app[POSTGRES].store.count(order_id)
    return Answer(200, encode({"count": n}), f"count {n}")


async def healthz(request: web.Request) -> Answer:
    return Answer(200, encode({"status": "ok"}), "ok")


async def get_faults(request: web.Request) -> Answer:
    return Answer(200, encode(request.app[FAULTS].shown()), "faults")


async def arm_faults(request: web.Request) -> Answer:
    """Set fault counts from ``{"hang_after_commit": n, "fail_before_commit": n,
    "stream_after_commit": n}``
    (and, in transactional mode, ``hold_before_receipt`` and ``hold_before_commit``)."""
    faults = request.app[FAULTS]
    try:
        wanted = json.loads(await request.read())
    except ValueError:
        return error(400, "body is not valid JSON")
    known = set(faults.armable)
    if not isinstance(wanted, dict) or not wanted or set(wanted) - known:
        return error(400, f"expected an object with some of {sorted(known)}")
    for name, count in wanted.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            return error(400, f"{name} must be a non-negative integer")
    for name, count in wanted.items():
        setattr(faults, name, count)
    return Answer(200, encode(faults.as_json()), f"armed {wanted}")


async def clear_faults(request: web.Request) -> Answer:
    faults = request.app[FAULTS]
    faults.clear()
    return Answer(200, encode(faults.as_json()), "cleared")


async def release_held(request: web.Request) -> Answer:
    """Let every charge held inside its transaction go on (to its receipt or commit)."""
    released = request.app[FAULTS].release()
    return Answer(200, encode({"released": released}), f"released {released}")


async def _release_withheld(app: web.Application) -> None:
    """On shutdown, drop withheld answers at once instead of waiting out the hour."""
    for task in list(app[FAULTS].withheld):
        task.cancel()


def build_app(
    db_path: str | Path,
    *,
    settlement_delay: float,
    key_retention: float,
    hang_after_commit: Sequence[str] = (),
    database_url: str | None = None,
    kit_secret: str | None = None,
    tombstone_wait: float = 1.0,
) -> web.Application:
    """The payment target as an aiohttp application, its database ready to use.

    ``hang_after_commit`` lists path prefixes whose charges always commit and then
    withhold their answer, in addition to faults armed at runtime via ``/_faults``.
    ``database_url`` adds transactional mode on that PostgreSQL database, with the
    kit's endpoints authenticated by ``kit_secret``; a tombstone waits at most
    ``tombstone_wait`` seconds for a charge whose receipt is not committed yet.
    """
    if settlement_delay < 0 or key_retention < 0:
        raise ValueError("settlement_delay and key_retention must not be negative")
    store = ChargeStore(Path(db_path))
    store.initialize()
    app = web.Application(middlewares=[log_requests])
    app[STORE] = store
    app[SETTINGS] = Settings(settlement_delay, key_retention, tuple(hang_after_commit))
    app[FAULTS] = Faults(transactional=database_url is not None)
    app.on_shutdown.append(_release_withheld)
    if database_url is not None:
        if not kit_secret:
            raise ValueError("transactional mode needs the kit's shared secret")
        _add_transactional(app, Postgres(database_url), kit_secret, tombstone_wait)
    app.add_routes(
        [
            web.post("/idempotent/v1/charges", post_idempotent),
            web.post("/reconcilable/v1/charges", post_reconcilable),
            web.get("/reconcilable/v1/charges", get_reconcilable),
            web.post("/unsafe/v1/charges", post_unsafe),
            web.get("/charges", list_charges),
            web.get("/charges/count", count_charges),
            web.get("/healthz", healthz),
            web.get("/_faults", get_faults),
            web.post("/_faults", arm_faults),
            web.delete("/_faults", clear_faults),
            web.post("/_faults/release", release_held),
        ]
    )
    return app


def _add_transactional(
    app: web.Application, postgres: Postgres, secret: str, tombstone_wait: float
) -> None:
    """The transactional route, its store opened with the app, and the kit on it."""

    async def open_store(_app: web.Application) -> AsyncIterator[None]:
        postgres.opened = await PgChargeStore.open(postgres.url)
        yield
        await postgres.opened.close()

    app[POSTGRES] = postgres
    app.cleanup_ctx.append(open_store)
    app.router.add_post("/transactional/v1/charges", post_transactional)
    backend = AsyncpgBackend(postgres.acquire, tombstone_wait=tombstone_wait)
    kit_aiohttp.setup(app, backend, secret=secret)
