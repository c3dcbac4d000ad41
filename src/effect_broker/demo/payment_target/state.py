"""The demo target's app state and answer type, shared by its handlers and delivery.

Apart from the handlers so that the fault-driven delivery of answers (``delivery``)
and the handlers read one set of app keys without importing each other.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from aiohttp import web

from effect_broker.demo.payment_target.charges import ChargeStore, encode
from effect_broker.demo.payment_target.faults import Faults
from effect_broker.demo.payment_target.pg_charges import PgChargeStore
from effect_broker.target import ATTEMPT_KEY_HEADER
from effect_broker.target.asyncpg import Connection

IDEMPOTENCY_HEADER = "Idempotency-Key"
CORRELATION_HEADER = "X-Correlation-Id"
REPLAYED_HEADER = "Idempotent-Replayed"


@dataclass(frozen=True)
class Settings:
    """How this target behaves: fixed for the life of the process."""

    settlement_delay: float
    key_retention: float
    hang_prefixes: tuple[str, ...] = ()


@dataclass
class Postgres:
    """Transactional mode's database: its URL, and its store once the app has started."""

    url: str
    opened: PgChargeStore | None = None

    @property
    def store(self) -> PgChargeStore:
        if self.opened is None:
            raise RuntimeError(
                "the PostgreSQL store is not open: the app has not started"
            )
        return self.opened

    def acquire(self) -> AbstractAsyncContextManager[Connection]:
        """A pooled connection for the kit's endpoints."""
        return self.store.pool.acquire()


STORE = web.AppKey("store", ChargeStore)
SETTINGS = web.AppKey("settings", Settings)
FAULTS = web.AppKey("faults", Faults)
POSTGRES = web.AppKey("postgres", Postgres)


class Answer(web.Response):
    """A JSON response that also carries the outcome written to the request log."""

    def __init__(
        self,
        status: int,
        body: bytes,
        outcome: str,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        super().__init__(
            status=status, body=body, content_type=content_type, headers=headers
        )
        self.outcome = outcome


def error(status: int, message: str) -> Answer:
    return Answer(status, encode({"error": message}), message)


def subject(request: web.Request) -> str:
    """The key or correlation id of a request, for the log line."""
    if key := request.headers.get(IDEMPOTENCY_HEADER):
        return f"key={key}"
    if attempt := request.headers.get(ATTEMPT_KEY_HEADER):
        return f"attempt={attempt}"
    correlation = request.headers.get(CORRELATION_HEADER) or request.query.get(
        "correlation_id"
    )
    return f"correlation={correlation}" if correlation else "-"
