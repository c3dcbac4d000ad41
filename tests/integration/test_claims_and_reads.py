"""The reconciler's claim, and reads that never cross a tenant boundary."""

from __future__ import annotations

from datetime import timedelta

import asyncpg
import pytest

from effect_broker.errors import EffectNotFound
from effect_broker.models import EffectStatus
from effect_broker.store import EffectFilter, Store
from effect_broker.store.sql import queries
from tests.citus_support import citus_url
from tests.integration.ledger import LEASE, reserve


async def expired_dispatch(store: Store, operation_key: str) -> None:
    effect = (await reserve(store, operation_key=operation_key)).effect
    await store.start_attempt(effect, owner="dead-proxy", lease=timedelta(0))


async def test_claim_skips_rows_another_transaction_holds(
    store: Store, database_url: str
) -> None:
    for key in ("a", "b", "c"):
        await expired_dispatch(store, key)
    holder = await asyncpg.connect(database_url)
    try:
        async with holder.transaction():
            held = await holder.fetchval(
                "SELECT effect_id FROM effects"
                " WHERE tenant_id = 'acme' AND operation_key = 'b' FOR UPDATE"
            )
            claimed = await store.claim_due(owner="worker-1", lease=LEASE, limit=10)
        assert {effect.operation_key for effect in claimed} == {"a", "c"}
        assert held not in {effect.effect_id for effect in claimed}
    finally:
        await holder.close()

    [late] = await store.claim_due(owner="worker-2", lease=LEASE, limit=10)
    assert late.operation_key == "b" and late.lease_owner == "worker-2"


async def test_claim_reclaims_expired_leases_and_leaves_live_ones(store: Store) -> None:
    await expired_dispatch(store, "expired")
    live = (await reserve(store, operation_key="live")).effect
    await store.start_attempt(live, owner="proxy-a", lease=timedelta(minutes=5))

    claimed = await store.claim_due(owner="worker-1", lease=LEASE, limit=10)

    assert [effect.operation_key for effect in claimed] == ["expired"]
    assert claimed[0].status is EffectStatus.DISPATCHING
    assert await store.claim_due(owner="worker-2", lease=LEASE, limit=10) == []


async def test_claim_respects_its_limit_and_takes_the_oldest_first(store: Store) -> None:
    for key in ("first", "second", "third"):
        await expired_dispatch(store, key)

    claimed = await store.claim_due(owner="worker-1", lease=LEASE, limit=2)

    assert [effect.operation_key for effect in claimed] == ["first", "second"]


async def test_the_claim_statement_uses_the_due_index(database_url: str) -> None:
    """The claim reads inside a plpgsql function, where EXPLAIN cannot look: the
    table's scan counters of the transaction say how it read (see test_index_use.py
    for the same on a ledger never analyzed)."""
    if citus_url() is not None:
        pytest.skip(
            "plain PostgreSQL's one-statement claim; a sharded ledger claims per tenant"
        )
    conn = await asyncpg.connect(database_url)
    try:
        # Many settled effects and a few due ones: the shape of a real ledger.
        await conn.execute(
            """
            INSERT INTO effects (effect_id, tenant_id, operation_key, request_hash, route,
                contract_name, contract_version, safety, downstream_key, status, due_at)
            SELECT gen_random_uuid(), 'acme', 'op-' || n, 'h', 'charge', 'c', '1',
                'idempotent', 'dk-' || n,
                CASE WHEN n % 500 = 0 THEN 'outcome_unknown' ELSE 'succeeded' END,
                CASE WHEN n % 500 = 0 THEN now() - interval '1 minute' END
            FROM generate_series(1, 20000) AS n
            """
        )
        # The event a claim's event chains to.
        await conn.execute(
            "INSERT INTO effect_events (tenant_id, effect_id, seq, kind, to_status,"
            " actor, prev_digest, digest) SELECT tenant_id, effect_id, 1, 'reserved',"
            " 'prepared', 'o', '', '' FROM effects WHERE due_at IS NOT NULL"
        )
        await conn.execute("ANALYZE effects")
        counters = (
            "SELECT seq_scan, idx_scan FROM pg_stat_xact_user_tables"
            " WHERE relname = 'effects'"
        )
        transaction = conn.transaction()
        await transaction.start()
        try:
            before = await conn.fetchrow(counters)
            claimed = await conn.fetch(queries()["claim_due"], 10, "worker", LEASE)
            after = await conn.fetchrow(counters)
        finally:
            await transaction.rollback()
    finally:
        await conn.close()
    assert len(claimed) == 10
    assert after["seq_scan"] == before["seq_scan"]
    assert after["idx_scan"] > before["idx_scan"]


async def test_reads_never_cross_tenants(store: Store) -> None:
    mine = (await reserve(store, tenant_id="acme")).effect
    await reserve(store, tenant_id="globex", operation_key="globex-op")

    with pytest.raises(EffectNotFound):
        await store.get("globex", mine.effect_id)
    assert await store.receipt("globex", mine.effect_id) is None
    assert await store.events("globex", mine.effect_id) == []
    assert await store.get_by_key("globex", mine.operation_key) is None
    page = await store.list_effects("globex")
    assert [effect.operation_key for effect in page.effects] == ["globex-op"]


async def test_listing_filters_and_pages_with_a_cursor(store: Store) -> None:
    for n in range(5):
        effect = (await reserve(store, operation_key=f"order-{n}:charge")).effect
        if n % 2:
            await store.start_attempt(effect, owner="proxy-a", lease=LEASE)
    await reserve(store, operation_key="refund-9", route="refund")

    first = await store.list_effects("acme", EffectFilter(route="charge"), limit=3)
    assert len(first.effects) == 3 and first.next_cursor is not None
    second = await store.list_effects(
        "acme", EffectFilter(route="charge"), cursor=first.next_cursor, limit=3
    )
    assert second.next_cursor is None
    keys = [e.operation_key for e in (*first.effects, *second.effects)]
    assert sorted(keys) == [f"order-{n}:charge" for n in range(5)]
    assert len(set(keys)) == 5

    dispatching = await store.list_effects(
        "acme", EffectFilter(statuses=[EffectStatus.DISPATCHING])
    )
    assert {e.operation_key for e in dispatching.effects} == {
        "order-1:charge",
        "order-3:charge",
    }
    prefixed = await store.list_effects(
        "acme", EffectFilter(operation_key_prefix="refund")
    )
    assert [e.operation_key for e in prefixed.effects] == ["refund-9"]
