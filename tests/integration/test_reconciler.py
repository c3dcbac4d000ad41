"""The reconciler on a real ledger and a real target: proof settles, nothing else does."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import asyncpg

from effect_broker.models import Effect, EffectStatus
from effect_broker.reconciler import Reconciler
from effect_broker.store import EffectFilter
from tests.integration.harness import Broker, arm_faults, request, running_broker
from tests.support import poll

CHARGE = {"amount": 1000, "currency": "usd", "order_id": "order-42"}
PATHS = {
    "idempotent": "/payments/v1/charges",
    "reconcilable": "/tickets/v1/charges",
    "unsafe": "/email/v1/charges",
}


async def send(broker: Broker, mode: str, key: str = "order-42:charge") -> int:
    answer = await request(
        "POST",
        broker.proxy_url + PATHS[mode],
        data=json.dumps(CHARGE),
        headers={"Operation-Key": key, "Content-Type": "application/json"},
    )
    return answer.status


async def lose_the_answer(broker: Broker, mode: str) -> None:
    """The target commits, the proxy times out: the outcome is unknown."""
    await arm_faults(broker, hang_after_commit=1)
    assert await send(broker, mode) == 504
    await arm_faults(broker, hang_after_commit=0)


async def settle_until(
    broker: Broker, reconciler: Reconciler, status: EffectStatus, deadline: float = 10.0
) -> None:
    """Run reconciler passes until the only effect reaches ``status``."""
    last: list[EffectStatus] = []

    async def reached() -> bool:
        await reconciler.run_once()
        [effect] = (await broker.state.store.list_effects("acme")).effects
        last[:] = [effect.status]
        return effect.status is status

    await poll(
        reached, within=deadline, every=0.05, what=lambda: f"{status}, still {last}"
    )


async def only_effect(broker: Broker) -> Effect:
    [effect] = (await broker.state.store.list_effects("acme")).effects
    return effect


async def test_idempotent_unknown_is_redispatched_with_the_same_key(
    database_url: str, tmp_path: Path
) -> None:
    async with running_broker(database_url, tmp_path, timeout="500ms") as broker:
        await lose_the_answer(broker, "idempotent")
        reconciler = Reconciler(broker.state.engine)
        await broker.state.store.reschedule(
            await only_effect(broker), delay=timedelta(0), actor="test"
        )

        await settle_until(broker, reconciler, EffectStatus.SUCCEEDED)

        assert len(broker.charges("order-42")) == 1
        assert (await only_effect(broker)).attempts == 2
        assert await send(broker, "idempotent") == 201


async def test_reconcilable_unknown_is_settled_by_the_probe_without_a_resend(
    database_url: str, tmp_path: Path
) -> None:
    async with running_broker(
        database_url, tmp_path, timeout="500ms", settlement_bound="200ms"
    ) as broker:
        await lose_the_answer(broker, "reconcilable")
        reconciler = Reconciler(broker.state.engine)

        await settle_until(broker, reconciler, EffectStatus.SUCCEEDED)

        effect = await only_effect(broker)
        assert effect.attempts == 1
        receipt = await broker.state.store.receipt("acme", effect.effect_id)
        assert receipt is not None and receipt.source.value == "probe"
        [charge] = broker.charges("order-42")
        assert receipt.external_id == charge["id"]


async def test_a_probe_before_the_settlement_bound_causes_no_redispatch(
    database_url: str, tmp_path: Path
) -> None:
    # The target's lookup lags 60 s behind; the contract's bound says 30 s. Before the
    # bound a "not found" proves nothing, so the reconciler must only wait.
    async with running_broker(
        database_url,
        tmp_path,
        timeout="500ms",
        settlement_bound="30s",
        settlement_delay=60.0,
    ) as broker:
        await lose_the_answer(broker, "reconcilable")
        effect = await only_effect(broker)
        await broker.state.store.reschedule(effect, delay=timedelta(0), actor="test")

        assert await Reconciler(broker.state.engine).run_once() == 1

        after = await only_effect(broker)
        assert after.status is EffectStatus.OUTCOME_UNKNOWN
        assert after.attempts == 1
        assert after.due_at is not None and after.due_at > after.updated_at
        assert len(broker.charges("order-42")) == 1


async def test_an_expired_retention_goes_to_manual_review_not_a_resend(
    database_url: str, tmp_path: Path
) -> None:
    async with running_broker(database_url, tmp_path, timeout="500ms") as broker:
        await lose_the_answer(broker, "idempotent")
        conn = await asyncpg.connect(database_url)
        try:
            await conn.execute(
                "UPDATE effects SET retention_deadline = now() - interval '1 second',"
                " due_at = now()"
            )
        finally:
            await conn.close()

        assert await Reconciler(broker.state.engine).run_once() == 1

        effect = await only_effect(broker)
        assert effect.status is EffectStatus.MANUAL_REVIEW
        assert effect.attempts == 1
        assert "retention" in (effect.last_error or "")
        assert len(broker.charges("order-42")) == 1


async def test_unsafe_unknown_stays_unknown_and_is_never_resent(
    database_url: str, tmp_path: Path
) -> None:
    async with running_broker(database_url, tmp_path, timeout="500ms") as broker:
        await lose_the_answer(broker, "unsafe")
        effect = await only_effect(broker)
        assert effect.due_at is None  # nothing is due: only a person can settle it
        await broker.state.store.reschedule(effect, delay=timedelta(0), actor="test")

        assert await Reconciler(broker.state.engine).run_once() == 1
        assert await Reconciler(broker.state.engine).run_once() == 0

        after = await only_effect(broker)
        assert after.status is EffectStatus.OUTCOME_UNKNOWN
        assert after.due_at is None and after.attempts == 1
        assert len(broker.charges("order-42")) == 1
        unknown = await broker.state.store.list_effects(
            "acme", EffectFilter(statuses=[EffectStatus.OUTCOME_UNKNOWN])
        )
        assert [e.effect_id for e in unknown.effects] == [effect.effect_id]


async def test_a_dead_dispatch_becomes_unknown_once_its_lease_expires(
    database_url: str, tmp_path: Path
) -> None:
    async with running_broker(database_url, tmp_path) as broker:
        store = broker.state.store
        reservation = await store.reserve(
            tenant_id="acme",
            operation_key="k",
            request_hash="h",
            route="email",
            contract_name="email.send",
            contract_version="1",
            safety=broker.state.config.contracts["email.send"].safety,
            downstream_key="dk",
            request_ciphertext=None,
            request_preview={},
            owner="dead-proxy",
            lease=timedelta(seconds=30),
        )
        await store.start_attempt(
            reservation.effect, owner="dead-proxy", lease=timedelta(0)
        )

        assert await Reconciler(broker.state.engine).run_once() == 1

        after = await only_effect(broker)
        assert after.status is EffectStatus.OUTCOME_UNKNOWN
        assert "stopped while it was dispatching" in (after.last_error or "")
        history = await store.events("acme", after.effect_id)
        [claim] = [event for event in history if event.kind == "claimed"]
        assert claim.details == {"previous_owner": "dead-proxy"}
        kinds = [event.kind for event in history]
        assert kinds[-2:] == ["lease_expired", "rescheduled"]
        assert after.due_at is None  # unsafe: nothing more is due without a person


async def test_two_reconcilers_never_work_on_one_effect_at_once(
    database_url: str, tmp_path: Path
) -> None:
    async with running_broker(database_url, tmp_path, timeout="500ms") as broker:
        for n in range(6):
            await arm_faults(broker, hang_after_commit=1)
            assert await send(broker, "idempotent", key=f"order-{n}") == 504
        await arm_faults(broker, hang_after_commit=0)
        conn = await asyncpg.connect(database_url)
        try:
            await conn.execute("UPDATE effects SET due_at = now()")
        finally:
            await conn.close()
        first, second = Reconciler(broker.state.engine), Reconciler(broker.state.engine)

        counts = await asyncio.gather(first.run_once(), second.run_once())

        assert sum(counts) == 6
        claimants: set[str] = set()
        for effect in (await broker.state.store.list_effects("acme")).effects:
            history = await broker.state.store.events("acme", effect.effect_id)
            claims = [e.actor for e in history if e.kind == "claimed"]
            assert len(claims) == 1, claims
            claimants.update(claims)
            assert effect.status is EffectStatus.SUCCEEDED
        assert claimants <= {first.owner, second.owner}
        assert len(broker.charges()) == 6
