"""Compare-and-swap writes, immutable receipts and the tamper-evident event chain."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest

from effect_broker.errors import IllegalTransition, StaleVersion
from effect_broker.history import fold_events
from effect_broker.models import Effect, EffectStatus, ReceiptSource, SafetyClass
from effect_broker.store import Store
from tests.integration.ledger import LEASE, reserve


@pytest.fixture
async def raw(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(database_url)
    yield conn
    await conn.close()


async def dispatching(store: Store, **overrides: object) -> Effect:
    effect = (await reserve(store, **overrides)).effect
    return await store.start_attempt(effect, owner="proxy-a", lease=LEASE)


async def settle(store: Store, effect: Effect) -> Effect:
    settled, _ = await store.record_receipt(
        effect,
        status=EffectStatus.SUCCEEDED,
        status_code=200,
        response_ciphertext=b"sealed",
        source=ReceiptSource.RESPONSE,
        actor="proxy-a",
    )
    return settled


async def test_a_stale_version_changes_nothing_and_says_so(store: Store) -> None:
    stale = await dispatching(store)
    current = await store.transition(
        stale, EffectStatus.OUTCOME_UNKNOWN, kind="timeout", actor="proxy-a"
    )

    with pytest.raises(StaleVersion, match="fenced"):
        await settle(store, stale)

    assert await store.get("acme", stale.effect_id) == current
    assert await store.receipt("acme", stale.effect_id) is None
    assert len(await store.events("acme", stale.effect_id)) == current.version


async def test_of_two_racing_writers_exactly_one_wins(store: Store) -> None:
    effect = await dispatching(store)

    results = await asyncio.gather(
        settle(store, effect),
        store.transition(effect, EffectStatus.OUTCOME_UNKNOWN, kind="timeout", actor="b"),
        return_exceptions=True,
    )

    winners = [result for result in results if isinstance(result, Effect)]
    losers = [result for result in results if isinstance(result, StaleVersion)]
    assert len(winners) == 1 and len(losers) == 1
    assert await store.get("acme", effect.effect_id) == winners[0]
    assert await store.verify_events(effect.tenant_id, effect.effect_id) is None


async def test_a_zombie_is_fenced_after_its_lease_was_claimed(store: Store) -> None:
    zombie_view = (await reserve(store)).effect
    zombie_view = await store.start_attempt(
        zombie_view, owner="zombie", lease=timedelta(0)
    )

    [claimed] = await store.claim_due(owner="reconciler", lease=LEASE, limit=10)
    assert claimed.lease_owner == "reconciler"

    with pytest.raises(StaleVersion):
        await settle(store, zombie_view)
    unknown = await store.transition(
        claimed, EffectStatus.OUTCOME_UNKNOWN, kind="lease_expired", actor="reconciler"
    )
    assert (await store.get("acme", claimed.effect_id)).version == unknown.version


async def test_the_state_machine_guards_every_write(store: Store) -> None:
    effect = await dispatching(store, safety=SafetyClass.UNSAFE)
    unknown = await store.transition(
        effect, EffectStatus.OUTCOME_UNKNOWN, kind="timeout", actor="proxy-a"
    )

    with pytest.raises(IllegalTransition, match="unsafe"):
        await store.start_attempt(unknown, owner="proxy-a", lease=LEASE)
    assert (await store.get("acme", unknown.effect_id)).status is (
        EffectStatus.OUTCOME_UNKNOWN
    )


async def test_receipts_are_immutable_in_the_database_itself(
    store: Store, raw: asyncpg.Connection
) -> None:
    settled = await settle(store, await dispatching(store))

    with pytest.raises(asyncpg.RestrictViolationError, match="append-only"):
        await raw.execute("UPDATE effect_receipts SET status_code = 500")
    with pytest.raises(asyncpg.RestrictViolationError, match="append-only"):
        await raw.execute("DELETE FROM effect_receipts")
    with pytest.raises(asyncpg.RestrictViolationError, match="append-only"):
        await raw.execute("TRUNCATE effect_receipts CASCADE")
    receipt = await store.receipt("acme", settled.effect_id)
    assert receipt is not None and receipt.status_code == 200


async def test_a_second_receipt_for_one_effect_is_refused(
    store: Store, raw: asyncpg.Connection
) -> None:
    settled = await settle(store, await dispatching(store))

    with pytest.raises(asyncpg.UniqueViolationError):
        await raw.execute(
            "INSERT INTO effect_receipts (tenant_id, effect_id, status_code,"
            " response_ciphertext, source) VALUES ($1, $2, 200, 'x', 'operator')",
            settled.tenant_id,
            settled.effect_id,
        )


async def test_editing_an_event_breaks_the_chain_at_that_sequence(
    store: Store, raw: asyncpg.Connection
) -> None:
    effect = await settle(store, await dispatching(store))
    assert effect.version == 3
    assert await store.verify_events(effect.tenant_id, effect.effect_id) is None

    with pytest.raises(asyncpg.RestrictViolationError):
        await raw.execute("UPDATE effect_events SET actor = 'mallory'")
    # Someone with the power to disable triggers rewrites history anyway.
    await raw.execute(
        "ALTER TABLE effect_events DISABLE TRIGGER effect_events_append_only"
    )
    await raw.execute(
        "UPDATE effect_events SET details = '{\"attempt\": 7}' WHERE seq = 2"
    )

    assert await store.verify_events(effect.tenant_id, effect.effect_id) == 2


async def test_a_deleted_event_breaks_the_chain_where_the_gap_is(
    store: Store, raw: asyncpg.Connection
) -> None:
    effect = await settle(store, await dispatching(store))
    await raw.execute(
        "ALTER TABLE effect_events DISABLE TRIGGER effect_events_append_only"
    )
    await raw.execute("DELETE FROM effect_events WHERE seq = 2")

    assert await store.verify_events(effect.tenant_id, effect.effect_id) == 3


async def test_history_records_every_move_in_order(store: Store) -> None:
    effect = await settle(store, await dispatching(store))

    events = await store.events("acme", effect.effect_id)
    assert [(e.seq, e.kind, e.to_status) for e in events] == [
        (1, "reserved", EffectStatus.PREPARED),
        (2, "dispatch", EffectStatus.DISPATCHING),
        (3, "settled", EffectStatus.SUCCEEDED),
    ]
    assert fold_events(events, at_sequence=2).status is EffectStatus.DISPATCHING
    assert fold_events(events).attempts == 1
    [attempt] = await store.attempts("acme", effect.effect_id)
    assert attempt.owner == "proxy-a"
