"""Every driver error, at every ledger write of the request path, gets a truthful answer.

The database's failures are injected into the store's own pool (the driver raises them
as it would), one statement and one exception class at a time. Before anything is sent
the answer says nothing was sent, and the target agrees; after the request was sent the
answer is ``outcome-unknown`` with the effect, never "nothing was sent".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.integration.harness import (
    PROBLEMS,
    Broker,
    ledger_rows,
    running_broker,
)
from tests.integration.proxy_support import charge, post

UNAVAILABLE: list[Exception] = [
    ConnectionResetError("connection reset by peer"),
    asyncpg.ConnectionDoesNotExistError("connection was closed in the middle"),
    asyncpg.InterfaceError("pool is closing"),
    asyncpg.InternalClientError("cannot switch to state 12"),
    asyncpg.AdminShutdownError("terminating connection due to administrator command"),
]
REFUSED: list[Exception] = [
    asyncpg.SerializationError("could not serialize access"),
    asyncpg.DataError("invalid input"),
]


class FailingPool:
    """The store's pool, except that one named statement raises ``error``."""

    def __init__(self, pool: Any, statement: str, error: Exception) -> None:
        self._pool, self._statement, self._error = pool, statement, error

    async def fetchrow(self, query: str, *args: Any) -> Any:
        if query == self._statement:
            raise self._error
        return await self._pool.fetchrow(query, *args)

    async def fetch(self, query: str, *args: Any) -> Any:
        if query == self._statement:
            raise self._error
        return await self._pool.fetch(query, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


class FailingConnections(FailingPool):
    """The pool the request path's writers keep their connections from: each one it
    hands out fails that statement the same way."""

    async def acquire(self) -> FailingPool:
        connection = await self._pool.acquire()
        return FailingPool(connection, self._statement, self._error)

    async def release(self, connection: FailingPool) -> None:
        await self._pool.release(connection._pool)


async def fail(broker: Broker, statement: str, error: Exception) -> None:
    store: Any = broker.state.store
    query = store._sql[statement]
    for writer in (store._reserving, store._starting, store._settling):
        await writer.release()
        writer._pool = FailingConnections(writer._pool, query, error)
    store._pool = FailingPool(store._pool, query, error)


@pytest.fixture
async def broker(database_url: str, tmp_path: Path) -> Any:
    async with running_broker(database_url, tmp_path) as running:
        yield running


def expected_before_sending(error: Exception) -> tuple[int, str]:
    return (503, "store-unavailable") if error in UNAVAILABLE else (500, "store-error")


@pytest.mark.parametrize("error", UNAVAILABLE + REFUSED, ids=lambda e: type(e).__name__)
async def test_a_failed_reservation_sends_nothing_and_says_so(
    broker: Broker, database_url: str, error: Exception
) -> None:
    await fail(broker, "reserve", error)

    answer = await post(
        f"{broker.proxy_url}/payments/v1/charges", key="k-1", body=charge("order-1")
    )

    status, problem_type = expected_before_sending(error)
    assert (answer.status, answer.problem["type"]) == (status, PROBLEMS + problem_type)
    assert "Traceback" not in answer.body.decode()
    assert await ledger_rows(database_url) == []
    assert broker.charges("order-1") == []


@pytest.mark.parametrize("error", UNAVAILABLE + REFUSED, ids=lambda e: type(e).__name__)
async def test_a_failed_dispatch_start_sends_nothing_and_leaves_it_prepared(
    broker: Broker, database_url: str, error: Exception
) -> None:
    """An unsafe effect is reserved and started in two commits: the second one fails."""
    await fail(broker, "start_attempt", error)

    answer = await post(
        f"{broker.proxy_url}/email/v1/charges", key="k-2", body=charge("order-2")
    )

    status, problem_type = expected_before_sending(error)
    assert (answer.status, answer.problem["type"]) == (status, PROBLEMS + problem_type)
    [effect] = await ledger_rows(database_url)
    assert (effect["status"], effect["attempts"]) == ("prepared", 0)
    assert broker.charges("order-2") == []


@pytest.mark.parametrize("error", UNAVAILABLE + REFUSED, ids=lambda e: type(e).__name__)
async def test_a_failed_receipt_after_sending_is_outcome_unknown_with_the_effect(
    broker: Broker, database_url: str, error: Exception
) -> None:
    await fail(broker, "record_receipt", error)

    answer = await post(
        f"{broker.proxy_url}/payments/v1/charges", key="k-3", body=charge("order-3")
    )

    assert answer.status == 502
    assert answer.problem["type"] == PROBLEMS + "outcome-unknown"
    assert answer.problem["effect_id"] == answer.headers["Effect-Id"]
    [effect] = await ledger_rows(database_url)
    assert effect["status"] == "dispatching"  # settled by the reconciler after its lease
    assert len(broker.charges("order-3")) == 1
