"""The agent's one tool: charge an order through the proxy, retried with one key.

The model asks for the charge; this code decides how it is sent and retried. The
operation key names the intent (the order and the step), built by
``effect_broker.client.operation_key``, so every retry of it, after a timeout, a reset
or a proxy that died, is the same effect to the ledger. The retry policy is the one
every agent platform has, spelled out: try again after a connection failure, a 5xx, or a
409/429 that says when (``Retry-After``); stop at any other answer.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from effect_broker.client import operation_key
from effect_broker.demo.agent.transcript import Transcript
from effect_broker.demo.crash_matrix.agent import problem_type

TOOL_NAME = "charge_order"
TOOL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Charge a customer's order once. Amount in minor units (cents).",
        "parameters": {
            "type": "object",
            "properties": {
                "order_id": {"type": "string", "description": "the order, e.g. order-42"},
                "amount": {"type": "integer", "description": "minor units: 4200 = 42.00"},
                "currency": {"type": "string", "description": "lowercase ISO, e.g. usd"},
            },
            "required": ["order_id", "amount", "currency"],
            "additionalProperties": False,
        },
    },
}
PAUSE = 0.2  # after a failure that does not say when to come back
RETRY_AFTER_CAP = 1.0
ATTEMPT_TIMEOUT = 20.0


class BadArguments(ValueError):
    """The model's arguments do not describe a charge."""


@dataclass(frozen=True, slots=True)
class Charge:
    order_id: str
    amount: int
    currency: str

    def body(self) -> dict[str, Any]:
        return {
            "amount": self.amount,
            "currency": self.currency,
            "order_id": self.order_id,
        }


def parse_arguments(arguments: str) -> Charge:
    """The model's JSON arguments as a charge, or ``BadArguments`` saying what is off."""
    try:
        given = json.loads(arguments or "{}")
    except ValueError as exc:
        raise BadArguments(f"arguments are not JSON: {exc}") from None
    if not isinstance(given, dict):
        raise BadArguments("arguments must be a JSON object")
    order_id, amount, currency = (
        given.get(k) for k in ("order_id", "amount", "currency")
    )
    if not isinstance(order_id, str) or not order_id:
        raise BadArguments("order_id must be a non-empty string")
    if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0:
        raise BadArguments("amount must be a positive integer in minor units")
    if not isinstance(currency, str) or not currency:
        raise BadArguments("currency must be a string such as usd")
    return Charge(order_id, amount, currency.lower())


@dataclass
class ChargeOutcome:
    """What the tool got in the end, and every attempt it took."""

    key: str
    status: int | None = None
    body: str = ""
    replayed: bool = False
    attempts: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def for_model(self) -> str:
        """The tool's result as the model reads it: JSON, short."""
        try:
            charge: Any = json.loads(self.body)
        except ValueError:
            charge = self.body
        return json.dumps(
            {
                "ok": self.ok,
                "status": self.status,
                "charge": charge,
                "attempts": len(self.attempts),
            }
        )


async def charge_order(
    endpoint: str, charge: Charge, transcript: Transcript, *, deadline: float = 60.0
) -> ChargeOutcome:
    """POST the charge to ``endpoint`` (the proxy's route) until a final answer."""
    key = operation_key(charge.order_id, "charge")
    outcome = ChargeOutcome(key)
    transcript.say("tool", f"POST {endpoint} with Operation-Key {key}")
    started = time.monotonic()
    # A fresh connection per attempt: a kept-alive socket to a dead proxy adds nothing.
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        while True:
            number = len(outcome.attempts) + 1
            pause: float | None = PAUSE
            try:
                async with session.post(
                    endpoint,
                    json=charge.body(),
                    headers={"Operation-Key": key},
                    timeout=aiohttp.ClientTimeout(total=ATTEMPT_TIMEOUT),
                ) as response:
                    outcome.status = response.status
                    outcome.body = await response.text()
                    outcome.replayed = (
                        response.headers.get("Idempotent-Replayed") == "true"
                    )
                    pause, said = _after_answer(response, outcome.body)
            except aiohttp.ClientConnectorError:
                said = "connection refused (no proxy listening)"
            except (
                aiohttp.ServerDisconnectedError,
                aiohttp.ClientOSError,
                aiohttp.ClientPayloadError,
            ):
                said = "connection reset before any answer (the proxy is gone)"
            except TimeoutError:
                said = f"no answer within {ATTEMPT_TIMEOUT:g}s"
            outcome.attempts.append(said)
            if pause is None:
                transcript.say("tool", f"attempt {number}: {said}")
                return outcome
            if time.monotonic() - started + pause >= deadline:
                transcript.say(
                    "tool", f"attempt {number}: {said}; giving up at the deadline"
                )
                return outcome
            transcript.say(
                "tool", f"attempt {number}: {said}; retrying with the same key"
            )
            await asyncio.sleep(pause)  # a retry's backoff, not synchronisation


def _after_answer(
    response: aiohttp.ClientResponse, body: str
) -> tuple[float | None, str]:
    """How long to wait before the next attempt (None: this answer is final), in words."""
    status = response.status
    kind = problem_type(body, response.headers.get("Content-Type", ""))
    words = f"{status}" + (f" {kind}" if kind else "")
    effect = response.headers.get("Effect-Status")
    if effect:
        words += f" (effect {effect})"
    if response.headers.get("Idempotent-Replayed") == "true":
        words += ", the recorded answer replayed"
    if status >= 500:
        return PAUSE, words
    retry_after = _seconds(response.headers.get("Retry-After"))
    if status in (409, 429) and retry_after is not None:
        return min(
            retry_after, RETRY_AFTER_CAP
        ), f"{words}, asked to come back in {retry_after:g}s"
    return None, words


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
