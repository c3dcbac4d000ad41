"""The real openai and stripe SDKs, pointed at the proxy: answers they understand.

Both SDKs retry 409 and 5xx on their own unless the answer says not to. An effect whose
outcome is unknown on an unsafe target, a reused key with another payload, and an
effect an operator resolved must each raise once, with the problem's ``message`` in
the exception, and never reach the target a second time.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import openai
import pytest
import stripe
from aiohttp import web

from effect_broker.engine.resolution import Resolution, ResolutionRequest
from tests.integration.harness import Broker, running_broker, serve_handler

ROUTES = """\
version: 1
proxy:
  operation_key_header: Idempotency-Key
contracts:
  - name: tool.unsafe
    version: "1"
    safety: unsafe
    timeout: 300ms
routes:
  - name: openai
    match: {{method: POST, path: /openai/v1/chat/completions}}
    strip_prefix: /openai
    upstream: {upstream}
    contract: tool.unsafe
  - name: stripe
    match: {{method: POST, path: /stripe/v1/charges}}
    strip_prefix: /stripe
    upstream: {upstream}
    contract: tool.unsafe
"""


class SilentTarget:
    """Takes every request and answers only after the proxy gave up: unknown outcome."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.release = asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        await self.release.wait()
        return web.json_response({}, status=201)


@pytest.fixture
async def broker(
    database_url: str, tmp_path: Path
) -> Any:  # AsyncIterator[tuple[Broker, SilentTarget]]
    target = SilentTarget()
    async with (
        serve_handler(target.handle) as upstream,
        running_broker(
            database_url, tmp_path, routes=lambda _: ROUTES.format(upstream=upstream)
        ) as running,
    ):
        try:
            yield running, target
        finally:
            target.release.set()


def chat(broker: Broker, key: str, content: str = "send the invoice") -> None:
    with openai.OpenAI(
        base_url=f"{broker.proxy_url}/openai/v1",
        api_key="sk-test",
        max_retries=2,  # the SDK's own retries: the answers must stop them
        default_headers={"Idempotency-Key": key},
    ) as client:
        client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": content}]
        )


def charge(broker: Broker, key: str, amount: int = 1000) -> None:
    http = stripe.RequestsClient()
    client = stripe.StripeClient(
        "sk_test_123",
        base_addresses={"api": f"{broker.proxy_url}/stripe"},
        max_network_retries=2,  # the SDK's own retries: the answers must stop them
        http_client=http,
    )
    try:
        client.v1.charges.create(
            params={"amount": amount, "currency": "usd"},
            options={"idempotency_key": key},
        )
    finally:
        http.close()


async def resolve_succeeded(broker: Broker, effect_id: str) -> None:
    effect = await broker.state.store.get("acme", uuid.UUID(effect_id))
    await broker.state.engine.resolve(
        effect,
        ResolutionRequest(
            Resolution.SUCCEEDED,
            "seen in the dashboard",
            {"checked_in": "dashboard"},
            "ch_123",
        ),
        actor="test",
    )


async def test_openai_does_not_retry_an_unknown_outcome_and_shows_why(
    broker: tuple[Broker, SilentTarget],
) -> None:
    running, target = broker

    with pytest.raises(openai.APIStatusError) as lost:
        await asyncio.to_thread(chat, running, "run-1:step-1")
    with pytest.raises(openai.APIStatusError) as again:
        await asyncio.to_thread(chat, running, "run-1:step-1")

    assert lost.value.status_code == 504
    assert lost.value.response.headers["x-should-retry"] == "false"
    assert "answer was lost" in str(lost.value)
    assert again.value.status_code == 409
    assert "do not retry it under a new key" in str(again.value)
    assert target.hits == ["/v1/chat/completions"]  # no SDK retry reached the target


async def test_openai_does_not_retry_a_reused_key_with_another_payload(
    broker: tuple[Broker, SilentTarget],
) -> None:
    running, target = broker
    with pytest.raises(openai.APIStatusError):
        await asyncio.to_thread(chat, running, "run-2:step-1", "first")

    with pytest.raises(openai.UnprocessableEntityError) as drift:
        await asyncio.to_thread(chat, running, "run-2:step-1", "second")

    assert drift.value.response.headers["x-should-retry"] == "false"
    assert "different payload" in str(drift.value)
    assert len(target.hits) == 1


async def test_openai_raises_on_a_resolved_effect_and_says_it_happened(
    broker: tuple[Broker, SilentTarget],
) -> None:
    running, target = broker
    with pytest.raises(openai.APIStatusError) as lost:
        await asyncio.to_thread(chat, running, "run-3:step-1")
    await resolve_succeeded(running, lost.value.response.headers["Effect-Id"])

    with pytest.raises(openai.ConflictError) as resolved:
        await asyncio.to_thread(chat, running, "run-3:step-1")

    problem = resolved.value.body
    assert isinstance(problem, dict)
    assert problem["type"].endswith("/resolved-by-operator")
    assert (problem["resolution"], problem["external_id"]) == ("succeeded", "ch_123")
    assert "this effect happened (ch_123)" in str(resolved.value)
    assert resolved.value.response.headers["Effect-Status"] == "succeeded"
    assert len(target.hits) == 1


async def test_stripe_does_not_retry_an_unknown_outcome_or_a_resolved_one(
    broker: tuple[Broker, SilentTarget],
) -> None:
    running, target = broker

    with pytest.raises(stripe.StripeError) as lost:
        await asyncio.to_thread(charge, running, "order-9:charge")
    assert lost.value.http_status == 504
    assert "answer was lost" in str(lost.value)
    effect = await running.state.store.get_by_key("acme", "order-9:charge")
    assert effect is not None
    await resolve_succeeded(running, str(effect.effect_id))

    with pytest.raises(stripe.StripeError) as resolved:
        await asyncio.to_thread(charge, running, "order-9:charge")

    assert resolved.value.http_status == 409
    assert "this effect happened (ch_123)" in str(resolved.value)
    assert target.hits == ["/v1/charges"]
