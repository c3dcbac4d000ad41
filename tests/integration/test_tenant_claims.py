"""The claims of a sharded ledger, tenant by tenant, checked on one PostgreSQL too.

A distributed ledger claims due work per tenant (a lock-free list of tenants, then one
single-tenant ``SKIP LOCKED`` claim each). The statements are plain SQL, so they run
here with the branch forced on: same leases, same fencing, same chained events, and a
fair share for every tenant.
"""

from __future__ import annotations

from datetime import timedelta

import asyncpg

from effect_broker.models import EffectStatus, ReceiptSource
from effect_broker.store import Store
from effect_broker.store.claims import fair_share
from tests.integration.ledger import LEASE, reserve

WEEK = {"payments.charge": timedelta(days=7)}


async def expired_dispatch(store: Store, tenant: str, key: str) -> None:
    effect = (await reserve(store, tenant_id=tenant, operation_key=key)).effect
    await store.start_attempt(effect, owner="dead-proxy", lease=timedelta(0))


def test_each_tenant_gets_an_even_share_rounded_up() -> None:
    assert fair_share(10, 4) == 3
    assert fair_share(2, 5) == 1
    assert fair_share(7, 1) == 7
    assert fair_share(0, 3) == 1


async def test_per_tenant_claims_share_the_limit_across_tenants(store: Store) -> None:
    store._per_tenant = True
    for tenant in ("acme", "globex"):
        for n in range(4):
            await expired_dispatch(store, tenant, f"{tenant}-{n}")

    claimed = await store.claim_due(owner="worker-1", lease=LEASE, limit=4)

    by_tenant = sorted(effect.tenant_id for effect in claimed)
    assert by_tenant == ["acme", "acme", "globex", "globex"]
    assert all(effect.lease_owner == "worker-1" for effect in claimed)
    rest = await store.claim_due(owner="worker-2", lease=LEASE, limit=10)
    assert len(rest) == 4
    assert await store.claim_due(owner="worker-3", lease=LEASE, limit=10) == []


async def test_per_tenant_claims_skip_held_rows_and_chain_their_events(
    store: Store, database_url: str
) -> None:
    store._per_tenant = True
    for key in ("a", "b"):
        await expired_dispatch(store, "acme", key)
    holder = await asyncpg.connect(database_url)
    try:
        async with holder.transaction():
            await holder.execute(
                "SELECT 1 FROM effects WHERE tenant_id = 'acme' AND operation_key = 'b'"
                " FOR UPDATE"
            )
            [claimed] = await store.claim_due(owner="worker-1", lease=LEASE, limit=10)
    finally:
        await holder.close()

    assert claimed.operation_key == "a"
    assert claimed.status is EffectStatus.DISPATCHING
    events = await store.events("acme", claimed.effect_id)
    assert [event.kind for event in events][-1] == "claimed"
    assert await store.verify_events("acme", claimed.effect_id) is None
    # the claim fenced the dead proxy's version
    assert claimed.version == events[-1].seq


async def test_per_tenant_pruning_deletes_settled_effects_of_every_tenant(
    store: Store, database_url: str
) -> None:
    store._per_tenant = True
    for tenant in ("acme", "globex", "initech"):
        effect = (await reserve(store, tenant_id=tenant)).effect
        effect = await store.start_attempt(effect, owner="proxy-a", lease=LEASE)
        await store.record_receipt(
            effect,
            status=EffectStatus.SUCCEEDED,
            status_code=200,
            response_ciphertext=b"sealed",
            source=ReceiptSource.RESPONSE,
            actor="proxy-a",
        )
    live = (await reserve(store, tenant_id="acme", operation_key="live")).effect
    raw = await asyncpg.connect(database_url)
    try:
        await raw.execute(
            "UPDATE effects SET updated_at = now() - interval '8 days',"
            " retention_deadline = now() - interval '1 day'"
        )
        routes = await store.prune_settled(WEEK, limit=2)
        assert routes == ["charge", "charge"]
        assert await store.prune_settled(WEEK, limit=10) == ["charge"]
        left = await raw.fetch("SELECT tenant_id, effect_id FROM effects")
    finally:
        await raw.close()
    assert [(row["tenant_id"], row["effect_id"]) for row in left] == [
        ("acme", live.effect_id)
    ]
