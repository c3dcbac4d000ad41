"""The proxy's own refusals in the error envelope of the target's SDK.

A contract's ``error_dialect`` makes each SDK raise its own typed exception, with the
proxy's message, for the refusals an agent meets: a missing key (400), a request in
flight (409), a payload mismatch (422, Stripe's own 400 ``idempotency_error``) and an
unknown outcome (504). The SDKs run unchanged, pointed at the sidecar's route prefix.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiohttp import web

from tests.integration.harness import Broker, running_broker, serve_handler

PROBLEMS = "https://effect-broker.dev/problems/"
T = TypeVar("T")

COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hi"},
            "finish_reason": "stop",
        }
    ],
}
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "content": [{"type": "text", "text": "hi"}],
    "model": "m",
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}
CHARGE = {"id": "ch_1", "object": "charge", "amount": 1000, "currency": "usd"}


def routes(upstream: str) -> str:
    return f"""\
version: 1
contracts:
  - name: stripe.charge
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    operation_key_header: Idempotency-Key
    key_retention: 1h
    timeout: 1s
    in_flight_wait: 1ms
    error_dialect: stripe
  - name: openai.chat
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 1h
    timeout: 1s
    in_flight_wait: 1ms
    error_dialect: openai
  - name: anthropic.messages
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 1h
    timeout: 1s
    in_flight_wait: 1ms
    error_dialect: anthropic
routes:
  - name: anthropic-messages
    match: {{method: POST, path: /anthropic/v1/messages}}
    strip_prefix: /anthropic
    upstream: {upstream}
    contract: anthropic.messages
  - name: stripe-charges
    match: {{method: POST, path: /stripe/v1/charges}}
    strip_prefix: /stripe
    upstream: {upstream}
    contract: stripe.charge
  - name: openai-chat
    match: {{method: POST, path: /openai/v1/chat/completions}}
    strip_prefix: /openai
    upstream: {upstream}
    contract: openai.chat
  - name: openai-closed
    match: {{method: POST, path: /closed/v1/chat/completions}}
    strip_prefix: /closed
    upstream: {upstream}
    contract: openai.chat
    passthrough: false
"""


@dataclass
class Upstream:
    """Answers at once, or holds the answer: ``hold`` until released, ``never``
    forever (past the contract's timeout)."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    held: asyncio.Event = field(default_factory=asyncio.Event)
    closing: asyncio.Event = field(default_factory=asyncio.Event)  # set at teardown

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if b"never" in body:
            await self.closing.wait()
        if b"hold" in body:
            self.held.set()
            await self.release.wait()
        if request.path.endswith("/charges"):
            return web.json_response(CHARGE)
        if request.path.endswith("/messages"):
            return web.json_response(MESSAGE)
        return web.json_response(COMPLETION)


@asynccontextmanager
async def broker(
    database_url: str, tmp_path: Path
) -> AsyncIterator[tuple[Broker, Upstream]]:
    upstream = Upstream()
    async with (
        serve_handler(upstream.handle) as url,
        running_broker(database_url, tmp_path, routes=lambda _: routes(url)) as b,
    ):
        try:
            yield b, upstream
        finally:
            upstream.closing.set()  # so the held handlers end before the servers stop


async def raised(call: Callable[[], Any]) -> BaseException:
    """The exception ``call`` raises in a worker thread (the SDKs here are sync)."""
    try:
        await asyncio.to_thread(call)
    except Exception as exc:
        return exc
    raise AssertionError("the call succeeded; an exception was expected")


async def while_held(
    upstream: Upstream, first: Callable[[], Any], second: Callable[[], T]
) -> BaseException:
    """``second`` raised while ``first`` is held at the upstream, then let go."""
    holder = asyncio.ensure_future(asyncio.to_thread(first))
    await asyncio.wait_for(upstream.held.wait(), 10)
    try:
        return await raised(second)
    finally:
        upstream.release.set()
        await holder


async def test_stripe_python_raises_its_own_exceptions(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stripe = pytest.importorskip("stripe")
    async with broker(database_url, tmp_path) as (b, upstream):
        monkeypatch.setattr(stripe, "api_base", f"{b.proxy_url}/stripe")
        monkeypatch.setattr(stripe, "max_network_retries", 0)

        def charge(key: str | None, amount: int = 1000, note: str = "") -> Any:
            options: dict[str, Any] = {"idempotency_key": key} if key else {}
            if note:
                options["description"] = note
            return stripe.Charge.create(
                api_key="sk_test_dialect", amount=amount, currency="usd", **options
            )

        # stripe-python always sends an Idempotency-Key (its own when none is
        # given), so its 400 here is a key the proxy cannot take.
        invalid = await raised(lambda: charge("k" * 300))
        assert type(invalid) is stripe.InvalidRequestError, invalid
        assert invalid.http_status == 400
        assert invalid.code == "invalid_operation_key"
        assert "Idempotency-Key is 300 characters long" in str(invalid.user_message)

        assert (await asyncio.to_thread(charge, "order-1")).id == "ch_1"
        mismatch = await raised(lambda: charge("order-1", amount=999))
        assert type(mismatch) is stripe.IdempotencyError, mismatch
        assert mismatch.http_status == 400
        assert "different payload" in str(mismatch.user_message)
        error = mismatch.json_body["error"]
        assert error["problem_type"] == PROBLEMS + "payload-mismatch"
        assert mismatch.headers["Effect-Status"] == "succeeded"

        busy = await while_held(
            upstream,
            lambda: charge("order-2", note="hold"),
            lambda: charge("order-2", note="hold"),
        )
        assert type(busy) is stripe.APIError, busy
        assert busy.http_status == 409
        assert busy.json_body["error"]["type"] == "idempotency_error"
        assert busy.json_body["error"]["code"] == "in_flight"

        unknown = await raised(lambda: charge("order-3", note="never"))
        assert type(unknown) is stripe.APIError, unknown
        assert unknown.http_status == 504
        assert unknown.json_body["error"]["code"] == "outcome_unknown"
        assert unknown.headers["Effect-Status"] == "outcome_unknown"


async def test_openai_raises_its_own_exceptions(
    database_url: str, tmp_path: Path
) -> None:
    openai = pytest.importorskip("openai")
    async with broker(database_url, tmp_path) as (b, upstream):
        client = openai.OpenAI(
            base_url=f"{b.proxy_url}/openai/v1", api_key="sk-test", max_retries=0
        )

        def chat(key: str | None, text: str = "hello") -> Any:
            headers = {"Operation-Key": key} if key else {}
            return client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": text}],
                extra_headers=headers,
            )

        try:
            missing = await raised(lambda: chat(None))
            assert type(missing) is openai.BadRequestError, missing
            assert missing.code == "missing_operation_key"
            assert "Operation-Key" in missing.message

            assert (await asyncio.to_thread(chat, "chat-1")).id == "chatcmpl-1"
            mismatch = await raised(lambda: chat("chat-1", "other text"))
            assert type(mismatch) is openai.UnprocessableEntityError, mismatch
            assert mismatch.code == "payload_mismatch"
            assert "different payload" in mismatch.message
            assert isinstance(mismatch.body, dict)
            assert mismatch.body["problem_type"] == PROBLEMS + "payload-mismatch"
            assert mismatch.response.headers["Effect-Status"] == "succeeded"

            busy = await while_held(
                upstream, lambda: chat("chat-2", "hold"), lambda: chat("chat-2", "hold")
            )
            assert type(busy) is openai.ConflictError, busy
            assert busy.code == "in_flight"

            unknown = await raised(lambda: chat("chat-3", "never"))
            assert type(unknown) is openai.InternalServerError, unknown
            assert unknown.status_code == 504
            assert unknown.code == "outcome_unknown"
        finally:
            client.close()


async def test_anthropic_raises_its_own_exceptions(
    database_url: str, tmp_path: Path
) -> None:
    anthropic = pytest.importorskip("anthropic")
    async with broker(database_url, tmp_path) as (b, upstream):
        client = anthropic.Anthropic(
            base_url=f"{b.proxy_url}/anthropic", api_key="sk-ant-test", max_retries=0
        )

        def message(key: str | None, text: str = "hello") -> Any:
            headers = {"Operation-Key": key} if key else {}
            return client.messages.create(
                model="m",
                max_tokens=10,
                messages=[{"role": "user", "content": text}],
                extra_headers=headers,
            )

        try:
            missing = await raised(lambda: message(None))
            assert type(missing) is anthropic.BadRequestError, missing
            error = missing.body["error"]
            assert error["type"] == "invalid_request_error"
            assert error["code"] == "missing_operation_key"
            assert "Operation-Key" in error["message"]

            assert (await asyncio.to_thread(message, "msg-1")).id == "msg_1"
            mismatch = await raised(lambda: message("msg-1", "other text"))
            assert type(mismatch) is anthropic.UnprocessableEntityError, mismatch
            assert mismatch.body["error"]["problem_type"] == PROBLEMS + "payload-mismatch"

            busy = await while_held(
                upstream,
                lambda: message("msg-2", "hold"),
                lambda: message("msg-2", "hold"),
            )
            assert type(busy) is anthropic.ConflictError, busy

            unknown = await raised(lambda: message("msg-3", "never"))
            assert type(unknown) is anthropic.GatewayTimeoutError, unknown
            assert isinstance(unknown, anthropic.InternalServerError)
            assert unknown.status_code == 504
            assert unknown.body["error"]["code"] == "outcome_unknown"
        finally:
            client.close()


async def test_a_refusal_under_a_prefix_speaks_the_prefix_routes_dialect(
    database_url: str, tmp_path: Path
) -> None:
    """No route records GET /closed/v1/models and its prefix refuses pass-through:
    the SDK pointed at that prefix still gets its own NotFoundError."""
    openai = pytest.importorskip("openai")
    async with broker(database_url, tmp_path) as (b, _):
        client = openai.OpenAI(
            base_url=f"{b.proxy_url}/closed/v1", api_key="sk-test", max_retries=0
        )
        try:
            refused = await raised(lambda: list(client.models.list()))
        finally:
            client.close()
        assert type(refused) is openai.NotFoundError, refused
        assert refused.code == "route_not_found"
        assert "openai-closed" in refused.message
