"""Reservation: one effect per (tenant, operation key), bound to one payload."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta

import asyncpg

from effect_broker.canonical import downstream_key
from effect_broker.crypto import Keyring, MasterKey
from effect_broker.models import EffectStatus, ReceiptSource, ReservationOutcome
from effect_broker.store import AttemptTerms, Store
from tests.integration.ledger import LEASE, reserve


async def test_a_thousand_concurrent_reservations_create_exactly_one_effect(
    store: Store, database_url: str
) -> None:
    outcomes = await asyncio.gather(*(reserve(store) for _ in range(1000)))

    counts = Counter(reservation.outcome for reservation in outcomes)
    assert counts == {ReservationOutcome.CREATED: 1, ReservationOutcome.REPLAY: 999}
    assert len({reservation.effect.effect_id for reservation in outcomes}) == 1
    conn = await asyncpg.connect(database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM effects") == 1
        assert await conn.fetchval("SELECT count(*) FROM effect_events") == 1
    finally:
        await conn.close()


async def test_another_payload_under_the_same_key_conflicts_and_changes_nothing(
    store: Store,
) -> None:
    original = (await reserve(store)).effect

    for attempt in range(5):
        conflict = await reserve(
            store, request_hash=f"hash-drift-{attempt}", request_preview={"amount": 1}
        )
        assert conflict.outcome is ReservationOutcome.CONFLICT
        assert conflict.effect == original

    assert await store.get("acme", original.effect_id) == original


async def test_the_same_key_in_another_tenant_is_an_independent_effect(
    store: Store,
) -> None:
    keyring = Keyring(MasterKey.generate())

    def key_for(tenant: str) -> str:
        return downstream_key(keyring.tenant_hmac_key(tenant), tenant, "order-42:charge")

    acme = await reserve(store, tenant_id="acme", downstream_key=key_for("acme"))
    globex = await reserve(store, tenant_id="globex", downstream_key=key_for("globex"))

    assert acme.outcome is globex.outcome is ReservationOutcome.CREATED
    assert acme.effect.effect_id != globex.effect.effect_id
    assert acme.effect.downstream_key != globex.effect.downstream_key


async def test_a_replay_returns_the_stored_receipt(store: Store) -> None:
    effect = (await reserve(store)).effect
    dispatching = await store.start_attempt(effect, owner="proxy-a", lease=LEASE)
    await store.record_receipt(
        dispatching,
        status=EffectStatus.SUCCEEDED,
        status_code=201,
        response_ciphertext=b"sealed-response",
        source=ReceiptSource.RESPONSE,
        actor="proxy-a",
        external_id="ch_123",
    )

    replay = await reserve(store)

    assert replay.outcome is ReservationOutcome.REPLAY
    assert replay.effect.status is EffectStatus.SUCCEEDED
    assert replay.receipt is not None
    assert replay.receipt.status_code == 201
    assert replay.receipt.response_ciphertext == b"sealed-response"
    assert replay.receipt.external_id == "ch_123"


async def test_a_fresh_reservation_has_no_receipt_and_holds_a_lease(store: Store) -> None:
    reservation = await reserve(store)

    assert reservation.receipt is None
    assert reservation.effect.status is EffectStatus.PREPARED
    assert reservation.effect.version == 1
    assert reservation.effect.lease_owner == "proxy-a"
    assert reservation.effect.due_at == reservation.effect.lease_expires_at


async def test_a_new_effect_can_be_reserved_and_started_in_one_commit(
    store: Store,
) -> None:
    terms = AttemptTerms(key_retention=timedelta(hours=1))

    outcomes = await asyncio.gather(*(reserve(store, start=terms) for _ in range(50)))

    [created] = [r for r in outcomes if r.outcome is ReservationOutcome.CREATED]
    effect = created.effect
    assert effect.status is EffectStatus.DISPATCHING
    assert (effect.version, effect.attempts) == (2, 1)
    assert effect.retention_deadline is not None
    assert effect.first_dispatched_at is not None
    assert effect.settlement_deadline is None
    [attempt] = await store.attempts("acme", effect.effect_id)
    assert attempt.owner == "proxy-a"
    events = await store.events("acme", effect.effect_id)
    assert [(e.seq, e.kind, e.to_status) for e in events] == [
        (1, "reserved", EffectStatus.PREPARED),
        (2, "dispatch", EffectStatus.DISPATCHING),
    ]
    assert await store.verify_events(effect.tenant_id, effect.effect_id) is None
