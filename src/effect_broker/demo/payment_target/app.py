"""The demo target's HTTP side: one aiohttp handler per mode, and fault injection.

Every handler validates the body, writes through ``ChargeStore`` (in a worker thread,
so concurrent requests really race in SQLite) and only then answers, unless a fault
says to lose that answer: the case that makes naive retries double-charge.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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

log = logging.getLogger("payment_target")

IDEMPOTENCY_HEADER = "Idempotency-Key"
CORRELATION_HEADER = "X-Correlation-Id"
REPLAYED_HEADER = "Idempotent-Replayed"

#: How long a withheld answer is held back: far longer than any client waits.
HANG_SECONDS = 3600.0

# --------------------------------------------------------------------------- app state


@dataclass(frozen=True)
class Settings:
    """How this target behaves: fixed for the life of the process."""

    settlement_delay: float
    key_retention: float
    hang_prefixes: tuple[str, ...] = ()


@dataclass
class Faults:
    """Failures armed at runtime through ``/_faults``; each count is used up in turn."""

    hang_after_commit: int = 0
    fail_before_commit: int = 0
    #: Handler tasks currently withholding an answer, cancelled when the server stops.
    withheld: set[asyncio.Task[Any]] = field(default_factory=set)

    def take(self, name: str) -> bool:
        """Use up one armed fault called ``name``; False when none is left."""
        left: int = getattr(self, name)
        if left <= 0:
            return False
        setattr(self, name, left - 1)
        return True

    def as_json(self) -> dict[str, int]:
        return {
            "hang_after_commit": self.hang_after_commit,
            "fail_before_commit": self.fail_before_commit,
        }


STORE = web.AppKey("store", ChargeStore)
SETTINGS = web.AppKey("settings", Settings)
FAULTS = web.AppKey("faults", Faults)


class Answer(web.Response):
    """A JSON response that also carries the outcome written to the request log."""

    def __init__(
        self,
        status: int,
        body: bytes,
        outcome: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(
            status=status, body=body, content_type="application/json", headers=headers
        )
        self.outcome = outcome


def error(status: int, message: str) -> Answer:
    return Answer(status, encode({"error": message}), message)


# --------------------------------------------------------------------------- handlers


def _subject(request: web.Request) -> str:
    """The key or correlation id of a request, for the log line."""
    if key := request.headers.get(IDEMPOTENCY_HEADER):
        return f"key={key}"
    correlation = request.headers.get(CORRELATION_HEADER) or request.query.get(
        "correlation_id"
    )
    return f"correlation={correlation}" if correlation else "-"


@web.middleware
async def log_requests(
    request: web.Request,
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> web.StreamResponse:
    """One stderr line per request: method, path, key or correlation id, outcome."""
    line = f"{request.method} {request.path_qs} {_subject(request)}"
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


async def _deliver(request: web.Request, answer: Answer) -> Answer:
    """Send a committed charge's answer, unless a fault says to lose it.

    A withheld answer models the worst case for any retrying client: the charge is
    committed, yet the caller sees only a timeout. The handler sleeps far longer than
    any client waits; stopping the server cancels it, dropping the connection unanswered.
    """
    faults = request.app[FAULTS]
    prefixes = request.app[SETTINGS].hang_prefixes
    if not (request.path.startswith(prefixes) or faults.take("hang_after_commit")):
        return answer
    log.info(
        "%s %s %s -> %s, answer withheld (fault hang_after_commit)",
        request.method,
        request.path_qs,
        _subject(request),
        answer.outcome,
    )
    task = asyncio.current_task()
    assert task is not None
    faults.withheld.add(task)
    try:
        await asyncio.sleep(HANG_SECONDS)
    finally:
        faults.withheld.discard(task)
    return answer


async def post_idempotent(request: web.Request) -> Answer:
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
    return await _deliver(request, answer)


async def post_reconcilable(request: web.Request) -> Answer:
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
    return await _deliver(request, answer)


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


async def post_unsafe(request: web.Request) -> Answer:
    """Always charge; there is no key and no way to ask afterwards what happened."""
    charge = await _read_charge(request)
    if isinstance(charge, Answer):
        return charge
    created = await asyncio.to_thread(request.app[STORE].charge, "unsafe", charge)
    answer = Answer(201, created.body, f"created {created.charge_id}")
    return await _deliver(request, answer)


async def list_charges(request: web.Request) -> Answer:
    rows = await asyncio.to_thread(
        request.app[STORE].list_charges, request.query.get("order_id")
    )
    return Answer(200, encode(rows), f"{len(rows)} charges")


async def count_charges(request: web.Request) -> Answer:
    n = await asyncio.to_thread(request.app[STORE].count, request.query.get("order_id"))
    return Answer(200, encode({"count": n}), f"count {n}")


async def healthz(request: web.Request) -> Answer:
    return Answer(200, encode({"status": "ok"}), "ok")


async def get_faults(request: web.Request) -> Answer:
    return Answer(200, encode(request.app[FAULTS].as_json()), "faults")


async def arm_faults(request: web.Request) -> Answer:
    """Set fault counts from ``{"hang_after_commit": n, "fail_before_commit": n}``."""
    faults = request.app[FAULTS]
    try:
        wanted = json.loads(await request.read())
    except ValueError:
        return error(400, "body is not valid JSON")
    known = set(faults.as_json())
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
    faults.hang_after_commit = faults.fail_before_commit = 0
    return Answer(200, encode(faults.as_json()), "cleared")


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
) -> web.Application:
    """The payment target as an aiohttp application, its database ready to use.

    ``hang_after_commit`` lists path prefixes whose charges always commit and then
    withhold their answer, in addition to faults armed at runtime via ``/_faults``.
    """
    if settlement_delay < 0 or key_retention < 0:
        raise ValueError("settlement_delay and key_retention must not be negative")
    store = ChargeStore(Path(db_path))
    store.initialize()
    app = web.Application(middlewares=[log_requests])
    app[STORE] = store
    app[SETTINGS] = Settings(settlement_delay, key_retention, tuple(hang_after_commit))
    app[FAULTS] = Faults()
    app.on_shutdown.append(_release_withheld)
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
        ]
    )
    return app
