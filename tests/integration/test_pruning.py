"""Pruning: settled effects past ledger_retention leave the ledger whole, in bounded
batches; nothing unsettled ever does, and the database itself holds that line.

Semantics of a replay after pruning: the ledger no longer knows the key, so the request
is a new effect, sent again under the same derived downstream key. The pruner only
deletes an effect whose key retention (first dispatch + key_retention) has also passed,
so until then a replay is always answered from the ledger; after it, the target alone
decides whether it still remembers the key.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from uuid import UUID

import asyncpg
import pytest

from effect_broker.models import Effect, EffectStatus, ReceiptSource, ReservationOutcome
from effect_broker.reconciler import Reconciler
from effect_broker.store import AttemptTerms, Store
from tests.integration.harness import request, running_broker
from tests.integration.ledger import reserve

WEEK = {"payments.charge": timedelta(days=7)}


@pytest.fixture
async def raw(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(database_url)
    yield conn
    await conn.close()


async def effect_in(store: Store, key: str, status: EffectStatus) -> Effect:
    """An effect of payments.charge brought to ``status`` through the store's writes."""
    started = AttemptTerms(key_retention=timedelta(hours=1))
    effect = (await reserve(store, operation_key=key, start=started)).effect
    if status in (EffectStatus.SUCCEEDED, EffectStatus.FAILED_FINAL):
        effect, _ = await store.record_receipt(
            effect,
            status=status,
            status_code=200 if status is EffectStatus.SUCCEEDED else 400,
            response_ciphertext=b"sealed",
            source=ReceiptSource.RESPONSE,
            actor="proxy-a",
        )
    elif status is not EffectStatus.DISPATCHING:
        effect = await store.transition(
            effect, EffectStatus.OUTCOME_UNKNOWN, kind="lost", actor="proxy-a"
        )
        if status is EffectStatus.MANUAL_REVIEW:
            effect = await store.transition(
                effect, EffectStatus.MANUAL_REVIEW, kind="review", actor="proxy-a"
            )
    assert effect.status is status
    return effect


async def age(raw: asyncpg.Connection, days: int, *, keys_forgotten: bool = True) -> None:
    """Make every effect look ``days`` old (and its key retention over, or not)."""
    deadline = "now() - interval '1 day'" if keys_forgotten else "now() + interval '1h'"
    await raw.execute(
        f"UPDATE effects SET updated_at = now() - make_interval(days => $1), "
        f"retention_deadline = {deadline}",
        days,
    )


async def remaining(raw: asyncpg.Connection, table: str, effect_id: UUID) -> int:
    count: int = await raw.fetchval(
        f"SELECT count(*) FROM {table} WHERE effect_id = $1", effect_id
    )
    return count


async def test_only_settled_effects_past_retention_are_pruned_whole(
    store: Store, raw: asyncpg.Connection
) -> None:
    settled = [
        await effect_in(store, "ok", EffectStatus.SUCCEEDED),
        await effect_in(store, "refused", EffectStatus.FAILED_FINAL),
    ]
    unsettled = [
        await effect_in(store, "unknown", EffectStatus.OUTCOME_UNKNOWN),
        await effect_in(store, "review", EffectStatus.MANUAL_REVIEW),
        await effect_in(store, "flying", EffectStatus.DISPATCHING),
    ]
    await age(raw, 30)

    routes = await store.prune_settled(WEEK, limit=100)

    assert routes == ["charge", "charge"]
    for effect in settled:
        for table in ("effects", "effect_receipts", "effect_events", "effect_attempts"):
            assert await remaining(raw, table, effect.effect_id) == 0, table
    for effect in unsettled:
        assert (await store.get("acme", effect.effect_id)).status is effect.status
        assert await store.verify_events(effect.tenant_id, effect.effect_id) is None
    assert await store.prune_settled(WEEK, limit=100) == []


async def test_nothing_younger_than_retention_or_of_another_contract_is_pruned(
    store: Store, raw: asyncpg.Connection
) -> None:
    await effect_in(store, "ok", EffectStatus.SUCCEEDED)
    await age(raw, 6)
    assert await store.prune_settled(WEEK, limit=100) == []

    await age(raw, 30)
    assert await store.prune_settled({"tickets.create": timedelta(days=1)}, limit=9) == []
    assert await store.prune_settled(WEEK, limit=100) == ["charge"]


async def test_an_effect_whose_key_the_target_may_still_hold_is_kept(
    store: Store, raw: asyncpg.Connection
) -> None:
    effect = await effect_in(store, "ok", EffectStatus.SUCCEEDED)
    await age(raw, 30, keys_forgotten=False)

    assert await store.prune_settled(WEEK, limit=100) == []
    replay = await reserve(store, operation_key="ok")
    assert replay.outcome is ReservationOutcome.REPLAY
    assert replay.effect.effect_id == effect.effect_id and replay.receipt is not None


async def test_pruning_is_bounded_per_batch(
    store: Store, raw: asyncpg.Connection
) -> None:
    for i in range(5):
        await effect_in(store, f"ok-{i}", EffectStatus.SUCCEEDED)
    await age(raw, 30)

    assert len(await store.prune_settled(WEEK, limit=2)) == 2
    assert len(await store.prune_settled(WEEK, limit=2)) == 2
    assert len(await store.prune_settled(WEEK, limit=2)) == 1


async def test_the_database_refuses_any_other_deletion(
    store: Store, raw: asyncpg.Connection
) -> None:
    settled = await effect_in(store, "ok", EffectStatus.SUCCEEDED)
    await effect_in(store, "unknown", EffectStatus.OUTCOME_UNKNOWN)

    with pytest.raises(asyncpg.RestrictViolationError, match="only settled effects"):
        await raw.execute("DELETE FROM effects WHERE operation_key = 'unknown'")
    with pytest.raises(asyncpg.RestrictViolationError, match="append-only"):
        await raw.execute("DELETE FROM effect_receipts")
    with pytest.raises(asyncpg.RestrictViolationError, match="append-only"):
        await raw.execute("DELETE FROM effect_events")
    assert await remaining(raw, "effect_receipts", settled.effect_id) == 1
    assert await raw.fetchval("SELECT count(*) FROM effects") == 2


async def test_the_reconciler_prunes_counts_and_a_later_replay_is_a_new_effect(
    database_url: str, tmp_path: Path
) -> None:
    # Without the in-memory replay cache: a process that replayed a key keeps its
    # receipt in memory (the very answer the ledger held) until it is evicted.
    async with running_broker(database_url, tmp_path, receipt_cache_bytes=0) as broker:

        async def charge() -> dict[str, str]:
            answer = await request(
                "POST",
                broker.proxy_url + "/payments/v1/charges",
                data=json.dumps({"amount": 1000, "currency": "usd", "order_id": "o-1"}),
                headers={
                    "Operation-Key": "o-1:charge",
                    "Content-Type": "application/json",
                },
            )
            assert answer.status == 201
            return dict(answer.headers)

        first = await charge()
        assert "Idempotent-Replayed" not in first
        assert (await charge()).get("Idempotent-Replayed") == "true"
        reconciler = Reconciler(broker.state.engine)
        assert await reconciler.prune_once() == 0  # a week has not passed

        conn = await asyncpg.connect(database_url)
        try:
            await age(conn, 8)
        finally:
            await conn.close()
        assert await reconciler.prune_once() == 1
        pruned = broker.state.engine.wiring.metrics.pruned.labels("payments")
        assert pruned._value.get() == 1

        # The ledger forgot it: a new effect, sent under the same derived key. This
        # target still remembers that key, so it answers its own replay and charges
        # nothing more; one that had forgotten it would charge again, which is why
        # pruning waits for the key retention too.
        again = await charge()
        assert again["Effect-Id"] != first["Effect-Id"]
        [effect] = (await broker.state.store.list_effects("acme")).effects
        assert str(effect.effect_id) == again["Effect-Id"] and effect.attempts == 1
        assert len(broker.charges("o-1")) == 1
