"""Group commit on a ledger sharded by tenant, checked on one PostgreSQL too.

A distributed ledger splits each batch of the request path's writes by tenant, so every
statement stays on one tenant's shard (``store/coalesced.py``). The per-tenant
statements are plain SQL, so they run here with the branch forced on: every request
still gets exactly its own answer, and the rows and event chains are the ones the
cross-tenant statement writes. One PostgreSQL keeps the cross-tenant statement.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import timedelta
from uuid import uuid4

import asyncpg
import pytest

from effect_broker.errors import StaleVersion
from effect_broker.models import (
    Effect,
    EffectStatus,
    Receipt,
    ReceiptSource,
    ReservationOutcome,
)
from effect_broker.store import AttemptTerms, Store
from tests.citus_support import citus_url
from tests.integration.ledger import LEASE, reserve

STARTED = AttemptTerms(key_retention=timedelta(hours=1))
TENANTS = ("acme", "globex", "initech")


class Recorded(Mapping[str, str]):
    """The store's queries, noting which block each write looked up."""

    def __init__(self, sql: Mapping[str, str]) -> None:
        self._sql = sql
        self.used: list[str] = []

    def __getitem__(self, name: str) -> str:
        self.used.append(name)
        return self._sql[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._sql)

    def __len__(self) -> int:
        return len(self._sql)


def recording(store: Store) -> Recorded:
    recorded = Recorded(store._sql)
    store._sql = recorded
    return recorded


async def settle(store: Store, effect: Effect) -> tuple[Effect, Receipt]:
    return await store.record_receipt(
        effect,
        status=EffectStatus.SUCCEEDED,
        status_code=201,
        response_ciphertext=b"sealed",
        source=ReceiptSource.RESPONSE,
        actor="p",
    )


async def test_a_batch_of_several_tenants_is_written_tenant_by_tenant(
    store: Store,
) -> None:
    store._per_tenant = True
    used = recording(store)
    keys = [(tenant, f"{tenant}-{n}") for n in range(4) for tenant in TENANTS]
    keys.append(("solo", "solo-0"))  # a tenant's share of one takes the one-row write

    results = await asyncio.gather(
        *(reserve(store, tenant_id=t, operation_key=k, start=STARTED) for t, k in keys)
    )

    assert max(store._reservations.sizes) > 1
    assert "reserve_batch_of_tenant" in used.used
    assert set(used.used) <= {"reserve", "reserve_batch_of_tenant"}
    for (tenant, key), result in zip(keys, results, strict=True):
        assert result.outcome is ReservationOutcome.CREATED
        effect = result.effect
        assert (effect.tenant_id, effect.operation_key) == (tenant, key)
        assert effect.status is EffectStatus.DISPATCHING and effect.version == 2
        assert effect == await store.get(tenant, effect.effect_id)
        assert await store.verify_events(tenant, effect.effect_id) is None
        [attempt] = await store.attempts(tenant, effect.effect_id)
        assert attempt.attempt_no == 1


async def test_starts_and_receipts_of_several_tenants_are_written_tenant_by_tenant(
    store: Store,
) -> None:
    store._per_tenant = True
    prepared = await asyncio.gather(
        *(
            reserve(store, tenant_id=tenant, operation_key=f"{tenant}-{n}")
            for n in range(3)
            for tenant in TENANTS
        )
    )
    used = recording(store)

    started = await asyncio.gather(
        *(store.start_attempt(r.effect, owner="p", lease=LEASE) for r in prepared)
    )
    settled = await asyncio.gather(*(settle(store, effect) for effect in started))

    assert "start_attempt_batch_of_tenant" in used.used
    assert "record_receipt_batch_of_tenant" in used.used
    assert not {"start_attempt_batch", "record_receipt_batch"} & set(used.used)
    for reservation, effect, (done, receipt) in zip(
        prepared, started, settled, strict=True
    ):
        tenant, effect_id = reservation.effect.tenant_id, reservation.effect.effect_id
        assert effect.status is EffectStatus.DISPATCHING and effect.attempts == 1
        assert done.status is EffectStatus.SUCCEEDED
        assert done == await store.get(tenant, effect_id)
        assert receipt == await store.receipt(tenant, effect_id)
        kinds = [event.kind for event in await store.events(tenant, effect_id)]
        assert kinds == ["reserved", "dispatch", "settled"]
        assert await store.verify_events(tenant, effect_id) is None


async def test_a_fenced_write_in_a_tenants_share_fails_alone(store: Store) -> None:
    store._per_tenant = True
    fenced: list[None] = []
    store.on_fenced = lambda: fenced.append(None)
    a, b, c = [
        (await reserve(store, tenant_id=tenant, operation_key=key)).effect
        for tenant, key in (("acme", "a"), ("acme", "b"), ("globex", "c"))
    ]

    stale, started, other = await asyncio.gather(
        store.start_attempt(replace(a, version=a.version + 7), owner="p", lease=LEASE),
        store.start_attempt(b, owner="p", lease=LEASE),
        store.start_attempt(c, owner="p", lease=LEASE),
        return_exceptions=True,
    )

    assert isinstance(stale, StaleVersion)
    assert isinstance(started, Effect) and isinstance(other, Effect)
    assert started == await store.get("acme", b.effect_id)
    assert other == await store.get("globex", c.effect_id)
    assert (await store.get("acme", a.effect_id)).status is EffectStatus.PREPARED
    assert len(fenced) == 1


async def test_a_tenants_share_answers_created_replay_and_conflict(store: Store) -> None:
    store._per_tenant = True
    taken = (await reserve(store, operation_key="taken", start=STARTED)).effect
    _, stored = await settle(store, taken)

    replay, fresh, other, conflict = await asyncio.gather(
        reserve(store, operation_key="taken", start=STARTED),
        reserve(store, operation_key="fresh", start=STARTED),
        reserve(store, tenant_id="globex", operation_key="taken", start=STARTED),
        reserve(store, operation_key="taken", request_hash="hash-2", start=STARTED),
    )

    assert replay.outcome is ReservationOutcome.REPLAY
    assert replay.effect.effect_id == taken.effect_id
    assert replay.receipt == stored
    assert conflict.outcome is ReservationOutcome.CONFLICT
    assert conflict.effect.effect_id == taken.effect_id
    assert fresh.outcome is other.outcome is ReservationOutcome.CREATED
    assert other.effect.effect_id != taken.effect_id


async def _reserve_uncommitted(conn: asyncpg.Connection, store: Store, key: str) -> str:
    """Reserve ``key`` for acme in ``conn``'s open transaction; the effect's id."""
    row = await conn.fetchrow(
        store._sql["reserve"],
        *(
            uuid4(),
            "acme",
            key,
            "hash-1",
            "charge",
            "payments.charge",
            "1",
            "idempotent",
            "dk-1",
            b"sealed-request",
            "{}",
            "proxy-b",
            LEASE,
            False,
            None,
            None,
        ),
    )
    assert row is not None and row["created"]
    return str(row["effect_id"])


async def test_a_key_created_while_the_share_waits_is_answered_from_the_ledger(
    store: Store, database_url: str
) -> None:
    """The share's statement waits on two keys another transaction is creating; once
    they commit, its snapshot cannot see them: those requests are asked again alone."""
    store._per_tenant = True
    holder = await asyncpg.connect(database_url)
    watcher = await asyncpg.connect(database_url)
    try:
        transaction = holder.transaction()
        await transaction.start()
        held = {key: await _reserve_uncommitted(holder, store, key) for key in "kx"}
        writing = asyncio.gather(
            *(reserve(store, operation_key=key, start=STARTED) for key in "jkx")
        )

        # on a cluster the statement waits on the tenant's worker
        activity = "citus_stat_activity" if citus_url() else "pg_stat_activity"

        async def blocked() -> bool:
            waiting = await watcher.fetchval(
                f"SELECT count(*) FROM {activity} WHERE datname = current_database()"
                " AND wait_event_type = 'Lock'"
            )
            return bool(waiting)

        for _ in range(1000):  # polls the server's view of the wait, 10 s at most
            if await blocked():
                break
            assert not writing.done(), "the batch did not wait for the held keys"
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the batch never waited for the held keys")
        await transaction.commit()
        j, k, x = await writing
    finally:
        await holder.close()
        await watcher.close()

    assert j.outcome is ReservationOutcome.CREATED
    for key, result in (("k", k), ("x", x)):
        assert result.outcome is ReservationOutcome.REPLAY
        assert str(result.effect.effect_id) == held[key]


@pytest.mark.skipif(citus_url() is not None, reason="on a cluster the ledger is sharded")
async def test_one_postgresql_keeps_the_cross_tenant_statement(store: Store) -> None:
    used = recording(store)

    results = await asyncio.gather(
        *(reserve(store, tenant_id=tenant, operation_key="k") for tenant in TENANTS * 2)
    )

    assert not await store._sharded()
    assert "reserve_batch" in used.used
    assert not [name for name in used.used if name.endswith("_of_tenant")]
    assert len({r.effect.effect_id for r in results}) == len(TENANTS)
