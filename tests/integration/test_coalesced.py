"""Group commit on a real ledger: concurrent writes share a statement, and every request
still gets exactly its own answer (created, replay, conflict, fenced, its own error)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta

import pytest

from effect_broker.errors import StaleVersion, StoreError
from effect_broker.models import (
    Effect,
    EffectStatus,
    Receipt,
    ReceiptSource,
    ReservationOutcome,
)
from effect_broker.store import AttemptTerms, Store
from tests.integration.ledger import LEASE, reserve

STARTED = AttemptTerms(key_retention=timedelta(hours=1))


async def test_concurrent_new_keys_share_statements_and_each_is_created(
    store: Store,
) -> None:
    results = await asyncio.gather(
        *(reserve(store, operation_key=f"k-{i}", start=STARTED) for i in range(40))
    )

    assert {r.outcome for r in results} == {ReservationOutcome.CREATED}
    assert len({r.effect.effect_id for r in results}) == 40
    assert max(store._reservations.sizes) > 1  # coalesced, not 40 commits
    for r in results:
        assert r.effect.status is EffectStatus.DISPATCHING and r.effect.version == 2
        assert r.effect.operation_key == f"k-{results.index(r)}"
        assert await store.verify_events(r.effect.tenant_id, r.effect.effect_id) is None
        [attempt] = await store.attempts("acme", r.effect.effect_id)
        assert attempt.attempt_no == 1


async def test_a_batch_answers_created_replay_and_conflict_row_by_row(
    store: Store,
) -> None:
    taken = (await reserve(store, operation_key="taken")).effect

    replay, conflict, created = await asyncio.gather(
        reserve(store, operation_key="taken"),
        reserve(store, operation_key="taken", request_hash="hash-2", tenant_id="acme"),
        reserve(store, operation_key="fresh"),
    )

    assert replay.outcome is ReservationOutcome.REPLAY
    assert replay.effect.effect_id == taken.effect_id
    assert conflict.outcome is ReservationOutcome.CONFLICT
    assert conflict.effect == taken  # untouched
    assert created.outcome is ReservationOutcome.CREATED


async def test_a_row_the_database_refuses_fails_alone(store: Store) -> None:
    good, bad, other = await asyncio.gather(
        reserve(store, operation_key="good"),
        reserve(store, operation_key="x" * 300),  # the CHECK on its length refuses it
        reserve(store, operation_key="other"),
        return_exceptions=True,
    )

    assert isinstance(bad, StoreError)
    assert not isinstance(good, BaseException) and not isinstance(other, BaseException)
    assert good.outcome is other.outcome is ReservationOutcome.CREATED
    assert await store.get_by_key("acme", "good") is not None
    assert 3 in store._reservations.sizes  # it was one batch, retried row by row


async def test_a_fenced_start_fails_alone(store: Store) -> None:
    fenced: list[None] = []
    store.on_fenced = lambda: fenced.append(None)
    first = (await reserve(store, operation_key="a")).effect
    second = (await reserve(store, operation_key="b")).effect

    stale, started = await asyncio.gather(
        store.start_attempt(
            replace(first, version=first.version + 7), owner="p", lease=LEASE
        ),
        store.start_attempt(second, owner="p", lease=LEASE),
        return_exceptions=True,
    )

    assert isinstance(stale, StaleVersion)
    assert not isinstance(started, BaseException)
    assert started.status is EffectStatus.DISPATCHING and started.attempts == 1
    assert started == await store.get("acme", second.effect_id)
    assert (await store.get("acme", first.effect_id)).status is EffectStatus.PREPARED
    assert len(fenced) == 1


async def test_a_fenced_receipt_fails_alone_and_the_other_is_stored(store: Store) -> None:
    a, b = [
        await store.start_attempt(
            (await reserve(store, operation_key=key)).effect, owner="p", lease=LEASE
        )
        for key in ("a", "b")
    ]

    async def settle(effect: Effect) -> tuple[Effect, Receipt]:
        return await store.record_receipt(
            effect,
            status=EffectStatus.SUCCEEDED,
            status_code=201,
            response_ciphertext=b"sealed",
            source=ReceiptSource.RESPONSE,
            actor="p",
        )

    stale, settled = await asyncio.gather(
        settle(replace(a, version=a.version - 1)), settle(b), return_exceptions=True
    )

    assert isinstance(stale, StaleVersion)
    assert isinstance(settled, tuple)
    effect, receipt = settled
    assert effect == await store.get("acme", b.effect_id)
    assert receipt == await store.receipt("acme", b.effect_id)
    assert await store.receipt("acme", a.effect_id) is None
    assert await store.verify_events(b.tenant_id, b.effect_id) is None


@pytest.mark.parametrize("count", [1, 25])
async def test_the_same_key_in_one_burst_creates_one_effect(
    store: Store, count: int
) -> None:
    results = await asyncio.gather(*(reserve(store) for _ in range(count)))

    assert sum(r.outcome is ReservationOutcome.CREATED for r in results) == 1
    assert len({r.effect.effect_id for r in results}) == 1
