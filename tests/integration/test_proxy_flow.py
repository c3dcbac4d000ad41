"""The request flow end to end: one effect on the target however often it is retried."""

from __future__ import annotations

import asyncio
import json

from tests.integration.harness import Answer, Broker, request

CHARGE = {"amount": 1000, "currency": "usd", "order_id": "order-42"}
FORWARD_URL = "http://payments.internal/v1/charges"


async def post(
    broker: Broker, url: str, *, key: str | None, body: object = CHARGE, **headers: str
) -> Answer:
    sent = {"Content-Type": "application/json", **headers}
    if key is not None:
        sent["Operation-Key"] = key
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await request(
        "POST",
        url,
        data=data,
        headers=sent,
        proxy=broker.proxy_url if "://payments" in url else None,
    )


async def test_a_retry_replays_the_receipt_byte_for_byte(broker: Broker) -> None:
    first = await post(
        broker, FORWARD_URL, key="order-42:charge", **{"Idempotency-Key": "mine"}
    )
    second = await post(
        broker, FORWARD_URL, key="order-42:charge", **{"Idempotency-Key": "other"}
    )

    assert first.status == second.status == 201
    assert first.body == second.body
    assert second.headers["Idempotent-Replayed"] == "true"
    assert first.headers["Effect-Id"] == second.headers["Effect-Id"]
    assert first.headers["Effect-Status"] == "succeeded"
    [charge] = broker.charges("order-42")
    assert charge["idempotency_key"] not in ("mine", "other")


async def test_fifty_concurrent_duplicates_reach_the_target_once(broker: Broker) -> None:
    answers = await asyncio.gather(
        *(post(broker, FORWARD_URL, key="order-42:charge") for _ in range(50))
    )

    statuses = {answer.status for answer in answers}
    assert statuses <= {201, 409}
    assert len(broker.charges("order-42")) == 1
    bodies = {answer.body for answer in answers if answer.status == 201}
    assert len(bodies) == 1


async def test_a_hot_replay_is_served_from_memory_and_still_checks_the_payload(
    broker: Broker,
) -> None:
    first = await post(broker, FORWARD_URL, key="order-42:charge")
    await post(broker, FORWARD_URL, key="order-42:charge")  # the first replay fills it
    assert len(broker.state.receipts) == 1

    # The ledger is no longer asked: a store that fails proves it.
    async def unreachable(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cached replay must not reach the ledger")

    broker.state.store.reserve = unreachable  # type: ignore[method-assign]
    cached = await post(broker, FORWARD_URL, key="order-42:charge")
    drift = await post(
        broker, FORWARD_URL, key="order-42:charge", body={**CHARGE, "amount": 1}
    )

    assert cached.status == first.status == 201
    assert cached.body == first.body
    assert cached.headers["Idempotent-Replayed"] == "true"
    assert cached.headers["Effect-Id"] == first.headers["Effect-Id"]
    assert drift.status == 422
    assert len(broker.charges("order-42")) == 1
