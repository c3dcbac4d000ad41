"""effect_broker.client against a live broker: the hooks with real requests and httpx
through the proxy, and EffectsClient against the admin API (which the CLI also uses)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
import requests

from effect_broker.client import (
    AdminProblem,
    AdminUnreachable,
    EffectsClient,
    install_httpx,
    install_requests,
    operation,
    operation_key,
)
from tests.integration.admin_support import UNSAFE, Admin, admin, order, settled, unknown
from tests.integration.harness import Broker

__all__ = ["admin"]  # the fixture, used by name


def post_with_requests(broker: Broker, key: str | None) -> requests.Response:
    session = install_requests(requests.Session())
    session.trust_env = False
    with session:
        url = f"{broker.proxy_url}/payments/v1/charges"
        if key is None:
            return session.post(url, json=order("order-7"))
        with operation(key):
            return session.post(url, json=order("order-7"))


def post_with_httpx(broker: Broker, key: str) -> httpx.Response:
    with install_httpx(httpx.Client(trust_env=False)) as client, operation(key):
        return client.post(
            f"{broker.proxy_url}/payments/v1/charges", json=order("order-7")
        )


async def test_the_hooks_put_the_current_key_on_real_clients_requests(
    admin: Admin,
) -> None:
    broker = admin.broker
    key = operation_key("checkout-7", "charge")

    first = await asyncio.to_thread(post_with_requests, broker, key)
    second = await asyncio.to_thread(post_with_httpx, broker, key)
    outside = await asyncio.to_thread(post_with_requests, broker, None)

    assert (first.status_code, second.status_code) == (201, 201)
    assert second.headers["Idempotent-Replayed"] == "true"
    assert first.headers["Effect-Id"] == second.headers["Effect-Id"]
    assert outside.status_code == 400  # no block, no key: refused, not guessed
    assert len(broker.charges("order-7")) == 1


async def test_an_async_httpx_client_gets_the_key_of_its_own_task(admin: Admin) -> None:
    broker = admin.broker
    url = f"{broker.proxy_url}/payments/v1/charges"

    async with install_httpx(httpx.AsyncClient(trust_env=False)) as client:

        async def charge(n: int) -> httpx.Response:
            with operation(f"order-{n}:charge"):
                return await client.post(url, json=order(f"order-{n}"))

        answers = await asyncio.gather(*(charge(n) for n in range(3)))

    assert [answer.status_code for answer in answers] == [201] * 3
    assert len({answer.headers["Effect-Id"] for answer in answers}) == 3


def operator_session(admin: Admin, settled_id: str, unknown_id: str) -> dict[str, Any]:
    client = EffectsClient(admin.url, admin.token)
    page = client.list(status=["outcome_unknown"])
    detail = client.inspect(unknown_id)
    resolved = client.resolve(
        unknown_id,
        "succeeded",
        "seen in the target's table",
        evidence={"checked_in": "charges table"},
        external_id="ch_9",
    )
    receipt = client.receipt(settled_id)
    try:
        client.reconcile(settled_id)
    except AdminProblem as exc:
        refused = exc
    return {
        "page": page,
        "detail": detail,
        "resolved": resolved,
        "receipt": receipt,
        "refused": refused,
    }


async def test_effects_client_lists_inspects_resolves_and_reads_receipts(
    admin: Admin,
) -> None:
    settled_id = await settled(admin.broker, "payments", "order-8:charge")
    [unknown_id] = await unknown(admin.broker, UNSAFE, "mail-8")

    seen = await asyncio.to_thread(operator_session, admin, settled_id, unknown_id)

    assert [effect["id"] for effect in seen["page"]["effects"]] == [unknown_id]
    assert seen["detail"]["status"] == "outcome_unknown"
    assert seen["resolved"]["status"] == "succeeded"
    assert seen["receipt"]["source"] == "response"
    answer = json.loads(seen["receipt"]["response"]["body_text"])
    assert answer["order_id"] == "order-8:charge"
    assert seen["refused"].status == 409  # a settled effect has nothing to reconcile


def test_an_unreachable_admin_api_is_one_clear_error() -> None:
    with pytest.raises(AdminUnreachable, match="connection refused"):
        EffectsClient("http://127.0.0.1:9", None).list()
