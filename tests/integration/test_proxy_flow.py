"""The request flow end to end: one effect on the target however often it is retried."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from tests.integration.harness import Broker

CHARGE = {"amount": 1000, "currency": "usd", "order_id": "order-42"}
FORWARD_URL = "http://payments.internal/v1/charges"


async def post(
    broker: Broker, url: str, *, key: str | None, body: object = CHARGE, **headers: str
) -> tuple[int, dict[str, str], bytes]:
    sent = {"Content-Type": "application/json", **headers}
    if key is not None:
        sent["Operation-Key"] = key
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url,
            data=data,
            headers=sent,
            proxy=broker.proxy_url if "://payments" in url else None,
        ) as response,
    ):
        return response.status, dict(response.headers), await response.read()


async def test_a_retry_replays_the_receipt_byte_for_byte(broker: Broker) -> None:
    first = await post(
        broker, FORWARD_URL, key="order-42:charge", **{"Idempotency-Key": "mine"}
    )
    second = await post(
        broker, FORWARD_URL, key="order-42:charge", **{"Idempotency-Key": "other"}
    )

    assert first[0] == second[0] == 201
    assert first[2] == second[2]
    assert second[1]["Idempotent-Replayed"] == "true"
    assert first[1]["Effect-Id"] == second[1]["Effect-Id"]
    assert first[1]["Effect-Status"] == "succeeded"
    [charge] = broker.charges("order-42")
    assert charge["idempotency_key"] not in ("mine", "other")


async def test_fifty_concurrent_duplicates_reach_the_target_once(broker: Broker) -> None:
    answers = await asyncio.gather(
        *(post(broker, FORWARD_URL, key="order-42:charge") for _ in range(50))
    )

    statuses = {status for status, _, _ in answers}
    assert statuses <= {201, 409}
    assert len(broker.charges("order-42")) == 1
    bodies = {body for status, _, body in answers if status == 201}
    assert len(bodies) == 1
