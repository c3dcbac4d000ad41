"""The target kit's in-transaction API on real PostgreSQL, with asyncpg and psycopg.

The property that matters: for one attempt key, exactly one of the attempt's commit
(mutation + receipt) and the proxy's tombstone ever commits, whatever the timing. The
races are staged with two real connections, and a wait is observed in
``pg_stat_activity`` rather than assumed after a sleep.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import suppress
from typing import Any

import asyncpg
import pytest

from effect_broker.target import (
    AttemptInProgress,
    AttemptState,
    AttemptTaken,
    KitNotInstalled,
    StoredAnswer,
    Tombstoned,
    tombstoned_answer,
)
from effect_broker.target.protocol import attempt_key
from tests.integration.target_support import (
    Driver,
    count_charges,
    driver,
    lock_waiters,
    prepare,
)
from tests.support import poll

KEY = attempt_key("downstream-key-of-one-effect", 1)
NEXT_KEY = attempt_key("downstream-key-of-one-effect", 2)


@pytest.fixture(params=["asyncpg", "psycopg"])
async def db(request: pytest.FixtureRequest, empty_database_url: str) -> Driver:
    await prepare(empty_database_url)
    return driver(request.param, empty_database_url)


@pytest.fixture
async def conn(db: Driver) -> AsyncIterator[Any]:
    connection = await db.connect()
    yield connection
    await connection.close()


@pytest.fixture
async def other(db: Driver) -> AsyncIterator[Any]:
    """A second session: the endpoint's connection racing the attempt's."""
    connection = await db.connect()
    yield connection
    await connection.close()


def counting_charge(db: Driver, calls: list[str]) -> Any:
    async def mutate(conn: Any) -> StoredAnswer:
        calls.append("charge")
        return await db.charge(conn, KEY)

    return mutate


async def test_an_attempt_commits_once_and_is_replayed(db: Driver, conn: Any) -> None:
    calls: list[str] = []
    first = await db.kit.run_attempt(conn, KEY, counting_charge(db, calls))
    again = await db.kit.run_attempt(conn, KEY, counting_charge(db, calls))

    assert first.status == 201
    assert again == first
    assert calls == ["charge"]
    assert await count_charges(db.url, KEY) == 1


async def test_lookup_tells_committed_tombstoned_and_absent(
    db: Driver, conn: Any
) -> None:
    await db.kit.run_attempt(conn, KEY, counting_charge(db, []))
    await db.kit.tombstone(conn, NEXT_KEY)

    committed = await db.kit.lookup(conn, KEY)
    tombstoned = await db.kit.lookup(conn, NEXT_KEY)
    absent = await db.kit.lookup(conn, attempt_key("another-effect", 1))

    assert committed.state is AttemptState.COMMITTED
    assert committed.answer == StoredAnswer(
        201, {"Content-Type": "application/json"}, b'{"charged":1}'
    )
    assert committed.at
    assert tombstoned.state is AttemptState.TOMBSTONED
    assert tombstoned.at
    assert tombstoned.answer is None
    assert absent.state is AttemptState.ABSENT


async def test_a_tombstone_wins_while_the_attempt_holds_its_transaction_open(
    db: Driver, conn: Any, other: Any
) -> None:
    """The receipt is the last statement: until then the key is free, so the tombstone
    commits at once, and the attempt's receipt then fails and takes the charge with it."""
    with pytest.raises(AttemptTaken):
        async with conn.transaction():
            assert await db.kit.prior(conn, KEY) is None
            await db.charge(conn, KEY)
            tombstone = await db.kit.tombstone(other, KEY, wait=5.0)
            assert tombstone.created
            await db.kit.record(conn, KEY, StoredAnswer(201))

    assert await count_charges(db.url, KEY) == 0
    assert (await db.kit.lookup(other, KEY)).state is AttemptState.TOMBSTONED

    # The proxy's next attempt, under the next key, commits exactly once.
    calls: list[str] = []
    answer = await db.kit.run_attempt(
        conn, NEXT_KEY, lambda c: calls.append("x") or db.charge(c, NEXT_KEY)
    )
    assert answer.status == 201
    assert calls == ["x"]
    assert await count_charges(db.url) == 1


async def test_a_lost_attempt_cannot_commit_even_if_its_error_is_swallowed(
    db: Driver, conn: Any, other: Any
) -> None:
    """PostgreSQL aborts the transaction on the unique key: a service that catches
    ``AttemptTaken`` and carries on still commits nothing."""
    with suppress(Exception):
        async with conn.transaction():
            await db.charge(conn, KEY)
            await db.kit.tombstone(other, KEY)
            with suppress(AttemptTaken):
                await db.kit.record(conn, KEY, StoredAnswer(201))

    assert await count_charges(db.url, KEY) == 0


async def test_run_attempt_answers_409_when_the_tombstone_came_first(
    db: Driver, conn: Any
) -> None:
    await db.kit.tombstone(conn, KEY)
    calls: list[str] = []

    answer = await db.kit.run_attempt(conn, KEY, counting_charge(db, calls))

    assert answer == tombstoned_answer(KEY)
    assert answer.status == 409
    assert calls == []
    async with conn.transaction():
        assert isinstance(await db.kit.prior(conn, KEY), Tombstoned)


async def test_run_attempt_answers_409_when_the_tombstone_came_during_it(
    db: Driver, conn: Any, other: Any
) -> None:
    async def charge_then_get_tombstoned(c: Any) -> StoredAnswer:
        answer = await db.charge(c, KEY)
        await db.kit.tombstone(other, KEY)
        return answer

    answer = await db.kit.run_attempt(conn, KEY, charge_then_get_tombstoned)

    assert answer.status == 409
    assert await count_charges(db.url) == 0


async def test_the_attempt_that_committed_first_refuses_the_tombstone(
    db: Driver, conn: Any, other: Any
) -> None:
    committed = await db.kit.run_attempt(conn, KEY, counting_charge(db, []))

    result = await db.kit.tombstone(other, KEY)

    assert not result.created
    assert result.report.state is AttemptState.COMMITTED
    assert result.report.answer == committed
    assert await count_charges(db.url, KEY) == 1


async def test_a_second_tombstone_finds_the_first(db: Driver, conn: Any) -> None:
    first = await db.kit.tombstone(conn, KEY)
    second = await db.kit.tombstone(conn, KEY)

    assert first.created and not second.created
    assert second.report.state is AttemptState.TOMBSTONED
    assert second.report.at == first.report.at


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
async def test_a_tombstone_waits_for_an_inserted_receipt(
    db: Driver, conn: Any, other: Any, outcome: str
) -> None:
    """Receipt inserted, not committed: the tombstone waits for the outcome. Commit:
    refused with the receipt; rollback: the tombstone commits."""
    answer = StoredAnswer(201, {"X-Charge": "1"}, b"charged")
    finish = asyncio.Event()

    async def attempt() -> None:
        async with conn.transaction():
            await db.charge(conn, KEY)
            await db.kit.record(conn, KEY, answer)
            await finish.wait()
            if outcome == "rollback":
                raise RuntimeError("the service failed after its receipt")

    attempting = asyncio.create_task(attempt())
    await poll(lambda: _receipt_inserted(db.url))
    tombstoning = asyncio.create_task(db.kit.tombstone(other, KEY, wait=30.0))
    await poll(lambda: lock_waiters(db.url))
    assert not tombstoning.done()

    finish.set()
    with suppress(RuntimeError):
        await attempting
    result = await tombstoning

    if outcome == "commit":
        assert not result.created
        assert result.report.state is AttemptState.COMMITTED
        assert result.report.answer == answer
        assert await count_charges(db.url, KEY) == 1
    else:
        assert result.created
        assert result.report.state is AttemptState.TOMBSTONED
        assert await count_charges(db.url, KEY) == 0


async def test_a_tombstone_waits_only_its_bound(
    db: Driver, conn: Any, other: Any
) -> None:
    """An attempt hanging after its receipt cannot hold the proxy's question forever:
    the tombstone gives up (``AttemptInProgress``: ask again) and changes nothing."""
    async with conn.transaction():
        await db.charge(conn, KEY)
        await db.kit.record(conn, KEY, StoredAnswer(201))
        with pytest.raises(AttemptInProgress):
            await db.kit.tombstone(other, KEY, wait=0.2)

    assert (await db.kit.lookup(other, KEY)).state is AttemptState.COMMITTED


async def test_prior_and_record_refuse_to_run_outside_a_transaction(
    db: Driver, conn: Any
) -> None:
    with pytest.raises(RuntimeError, match="inside the service's transaction"):
        await db.kit.prior(conn, KEY)
    with pytest.raises(RuntimeError, match="inside the service's transaction"):
        await db.kit.record(conn, KEY, StoredAnswer(201))


@pytest.mark.parametrize("name", ["asyncpg", "psycopg"])
async def test_a_missing_table_is_named_with_how_to_create_it(
    empty_database_url: str, name: str
) -> None:
    db = driver(name, empty_database_url)
    conn = await db.connect()
    try:
        with pytest.raises(KitNotInstalled) as missing:
            await db.kit.check_installed(conn)
        with pytest.raises(KitNotInstalled):
            await db.kit.lookup(conn, KEY)

        await db.kit.install(conn)
        await db.kit.install(conn)  # every migration is safe to re-run
        await db.kit.check_installed(conn)
    finally:
        await conn.close()
    message = str(missing.value)
    assert "table effect_broker_attempts is missing" in message
    assert "install(conn)" in message
    assert "python -m effect_broker.target.schema" in message


async def test_a_table_of_another_shape_is_refused(empty_database_url: str) -> None:
    conn = await asyncpg.connect(empty_database_url)
    try:
        await conn.execute("CREATE TABLE effect_broker_attempts (attempt_key text)")
        with pytest.raises(KitNotInstalled, match=r"state \(missing, expected text\)"):
            await driver("asyncpg", empty_database_url).kit.check_installed(conn)
    finally:
        await conn.close()


async def _receipt_inserted(url: str) -> bool | None:
    """Whether some session has inserted (not committed) a receipt: its lock shows."""
    conn = await asyncpg.connect(url)
    try:
        n = await conn.fetchval(
            "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
            " WHERE c.relname = 'effect_broker_attempts' AND l.mode = 'RowExclusiveLock'"
        )
    finally:
        await conn.close()
    return True if n else None
