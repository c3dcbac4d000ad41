"""Every runtime write on the cluster goes to one shard, group commit included.

Citus counts, per database, the distributed executions it ran on one shard and on
several (``citus_stat_counters``, with ``citus.enable_stat_counters`` on). A batch of
several tenants' writes is split by tenant on a sharded ledger, so it must add no
multi-shard execution, where the cross-tenant statement of one PostgreSQL spans
shards. Each one-row write of the request path and the reconciler must work through
the coordinator, its event chained, on one shard as well.

(Two-phase commit is not what these count: a write whose statement inserts from a
data-modifying CTE runs as several single-shard steps, and Citus copies the
intermediate results of such an INSERT ... SELECT to every worker, which makes each
worker a participant of the commit. On the cluster each write is therefore a call of
a function distributed by tenant, which runs whole on the tenant's worker;
``test_two_phase.py`` checks that, and docs/how-to/citus.md says what it costs.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta

import asyncpg
import pytest

from effect_broker.models import (
    Effect,
    EffectStatus,
    ReceiptSource,
    ReservationOutcome,
    SafetyClass,
)
from effect_broker.store import AttemptTerms, Store
from tests.citus_support import SKIP_REASON, citus_url
from tests.integration.ledger import LEASE, reserve

if citus_url() is None:
    pytest.skip(SKIP_REASON, allow_module_level=True)

STARTED = AttemptTerms(key_retention=timedelta(hours=1))
#: Enough tenants to land on every shard of a test ledger (4 shards, 2 workers).
TENANTS = [f"tenant-{n}" for n in range(8)]


@dataclass(frozen=True)
class Counts:
    single_shard: int
    multi_shard: int


async def counts(conn: asyncpg.Connection) -> Counts:
    row = await conn.fetchrow(
        "SELECT query_execution_single_shard AS single, query_execution_multi_shard"
        " AS multi FROM citus_stat_counters WHERE name = current_database()"
    )
    assert row is not None
    return Counts(row["single"], row["multi"])


@pytest.fixture
async def counted(database_url: str) -> AsyncIterator[tuple[Store, asyncpg.Connection]]:
    """A store whose sessions count their distributed executions, and a watcher."""
    watcher = await asyncpg.connect(database_url)
    database = await watcher.fetchval("SELECT current_database()")
    await watcher.execute(
        f'ALTER DATABASE "{database}" SET citus.enable_stat_counters = on'
    )
    store = await Store.connect(database_url, max_size=20)
    try:
        yield store, watcher
    finally:
        await store.close()
        await watcher.close()


async def test_the_tenants_span_both_workers(
    counted: tuple[Store, asyncpg.Connection],
) -> None:
    _, watcher = counted
    nodes = await watcher.fetchval(
        "SELECT count(DISTINCT s.nodeport) FROM unnest($1::text[]) AS t (tenant_id),"
        " LATERAL (SELECT nodeport FROM citus_shards WHERE shardid ="
        " get_shard_id_for_distribution_column('effects', t.tenant_id)) AS s",
        TENANTS,
    )
    assert nodes == 2


async def test_batches_of_several_tenants_run_one_shard_per_statement(
    counted: tuple[Store, asyncpg.Connection],
) -> None:
    store, watcher = counted
    assert await store._sharded()
    keys = [(tenant, f"{tenant}-{n}") for n in range(3) for tenant in TENANTS]
    before = await counts(watcher)

    created = await asyncio.gather(
        *(reserve(store, tenant_id=t, operation_key=k, start=STARTED) for t, k in keys)
    )
    prepared = await asyncio.gather(
        *(reserve(store, tenant_id=t, operation_key=f"{k}-later") for t, k in keys)
    )
    started = await asyncio.gather(
        *(store.start_attempt(r.effect, owner="p", lease=LEASE) for r in prepared)
    )
    settled = await asyncio.gather(
        *(
            store.record_receipt(
                effect,
                status=EffectStatus.SUCCEEDED,
                status_code=201,
                response_ciphertext=b"sealed",
                source=ReceiptSource.RESPONSE,
                actor="p",
            )
            for effect in [r.effect for r in created] + started
        )
    )
    after = await counts(watcher)

    batched = [
        store._reservations.sizes,
        store._starts.sizes,
        store._receipts.sizes,
    ]
    assert all(max(sizes) > len(TENANTS) for sizes in batched), batched
    assert {r.outcome for r in created + prepared} == {ReservationOutcome.CREATED}
    assert len(settled) == 2 * len(keys)
    assert after.multi_shard == before.multi_shard
    assert after.single_shard > before.single_shard
    for effect, _ in settled:
        assert effect == await store.get(effect.tenant_id, effect.effect_id)
        assert await store.verify_events(effect.tenant_id, effect.effect_id) is None


async def test_the_cross_tenant_statement_spans_shards_there(
    counted: tuple[Store, asyncpg.Connection],
) -> None:
    """The control: what one PostgreSQL's batch does on the cluster, and what the
    counters show for it (so the test above can see a multi-shard statement)."""
    store, watcher = counted
    store._per_tenant = False
    before = await counts(watcher)

    created = await asyncio.gather(
        *(reserve(store, tenant_id=t, operation_key="k", start=STARTED) for t in TENANTS)
    )

    after = await counts(watcher)
    assert {r.outcome for r in created} == {ReservationOutcome.CREATED}
    assert after.multi_shard > before.multi_shard


async def test_every_one_row_write_runs_on_one_shard(
    counted: tuple[Store, asyncpg.Connection],
) -> None:
    """Reserve, start, renew, lose the outcome, claim, reconcile, back off and settle:
    each write alone, through the coordinator, its event chained on the shard. (The
    reconciler's lock-free list of tenants with due work is the one read across
    shards; its claim is not.)"""
    store, watcher = counted
    before = await counts(watcher)

    reconcilable = SafetyClass.RECONCILABLE
    effect = (await reserve(store, tenant_id="tenant-3", safety=reconcilable)).effect
    effect = await store.start_attempt(effect, owner="p", lease=LEASE)
    effect = await store.renew_lease(effect, owner="p", lease=LEASE)
    effect = await store.transition(
        effect,
        EffectStatus.OUTCOME_UNKNOWN,
        kind="timeout",
        actor="p",
        due_in=timedelta(0),
        error="timed out",
    )
    listed = await counts(watcher)
    [claimed] = await store.claim_due(owner="r", lease=LEASE, limit=10)
    claim = await counts(watcher)
    assert claim.multi_shard == listed.multi_shard + 1  # the list of tenants alone
    assert claimed.effect_id == effect.effect_id
    effect = await store.transition(
        claimed,
        EffectStatus.RECONCILING,
        kind="probe",
        actor="r",
        lease_owner="r",
        lease=LEASE,
    )
    effect = await store.reschedule(effect, delay=timedelta(seconds=5), actor="r")
    settled, receipt = await store.record_receipt(
        effect,
        status=EffectStatus.SUCCEEDED,
        status_code=200,
        response_ciphertext=b"sealed",
        source=ReceiptSource.PROBE,
        actor="r",
    )
    started = await store.start_attempt(
        (await reserve(store, tenant_id="tenant-5", operation_key="b")).effect,
        owner="p",
        lease=LEASE,
    )

    after = await counts(watcher)
    assert after.multi_shard - 1 == before.multi_shard  # the list of tenants
    for done in (settled, started):
        assert isinstance(done, Effect)
        assert done == await store.get(done.tenant_id, done.effect_id)
        assert await store.verify_events(done.tenant_id, done.effect_id) is None
    assert receipt == await store.receipt("tenant-3", settled.effect_id)
    kinds = [event.kind for event in await store.events("tenant-3", settled.effect_id)]
    assert kinds == [
        "reserved",
        "dispatch",
        "lease_renewed",
        "timeout",
        "claimed",
        "probe",
        "rescheduled",
        "settled",
    ]
