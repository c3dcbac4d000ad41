"""The explorer's agents: many clients at once, each retrying the way real agents do.

An agent works through its operations in schedule order. For each it posts the charge
with the operation's key and keeps asking, with the same key and body, after a timeout,
a reset, a 5xx, a 409 or 429 with ``Retry-After``, moving to the next proxy (a load
balancer's round robin). It stops at a 2xx or another 4xx, or at the proxy's honest
``outcome-unknown`` without ``Retry-After``, or at the operation's deadline. Every
answer (and every missing one) is recorded with the times around it for the oracle.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from effect_broker.demo.crash_matrix.agent import problem_type
from effect_broker.demo.explorer.oracle import Answer
from effect_broker.demo.explorer.schedule import Op

ATTEMPT_TIMEOUT = 3.0  # a proxy answers within its route's 1 s timeout unless stuck
OP_DEADLINE = 25.0  # an agent stops asking for one operation after this
PAUSE = 0.1  # after a failure without Retry-After
RETRY_AFTER_CAP = 1.0


def charge_body(op: Op) -> bytes:
    """The charge for ``op``: its key is the order id, so the target's rows name it."""
    document = {"amount": op.amount, "currency": "usd", "order_id": op.key}
    return json.dumps(document, sort_keys=True).encode()


@dataclass
class Agents:
    """``count`` agents sharing the proxies' URLs and one list of answers."""

    proxy_urls: Sequence[str]
    answers: list[Answer]
    started: float  # monotonic time of the round's start: ``Op.at`` counts from it

    async def run(self, ops: Sequence[Op], count: int) -> None:
        mine = [[op for op in ops if op.agent == agent] for agent in range(count)]
        await asyncio.gather(
            *(self._agent(agent, share) for agent, share in enumerate(mine))
        )

    async def _agent(self, agent: int, ops: Sequence[Op]) -> None:
        connector = aiohttp.TCPConnector(force_close=True)
        timeout = aiohttp.ClientTimeout(total=ATTEMPT_TIMEOUT)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            for op in ops:
                wait = self.started + op.at - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)  # the agent's own pace: the schedule's time
                await self._ask(session, agent, op)

    async def _ask(self, session: aiohttp.ClientSession, agent: int, op: Op) -> None:
        deadline = time.monotonic() + OP_DEADLINE
        body = charge_body(op)
        turn = agent
        while True:
            proxy = turn % len(self.proxy_urls)
            answer = await self._attempt(session, agent, proxy, op, body)
            self.answers.append(answer)
            pause = answer.next_pause(RETRY_AFTER_CAP, PAUSE)
            if pause is None or time.monotonic() + pause >= deadline:
                return
            turn += 1
            await asyncio.sleep(pause)  # a retry's backoff, not synchronisation

    async def _attempt(
        self,
        session: aiohttp.ClientSession,
        agent: int,
        proxy: int,
        op: Op,
        body: bytes,
    ) -> Answer:
        url = f"{self.proxy_urls[proxy]}/{op.mode}/v1/charges"
        headers = {"Operation-Key": op.key, "Content-Type": "application/json"}
        started = time.time()
        try:
            async with session.post(url, data=body, headers=headers) as response:
                text = await response.text()
                return Answer(
                    key=op.key,
                    agent=agent,
                    proxy=proxy,
                    started=started,
                    finished=time.time(),
                    status=response.status,
                    problem=problem_type(text, response.headers.get("Content-Type", "")),
                    retry_after=_seconds(response.headers.get("Retry-After")),
                    replayed=response.headers.get("Idempotent-Replayed") == "true",
                    body=text,
                )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return Answer(
                key=op.key,
                agent=agent,
                proxy=proxy,
                started=started,
                finished=time.time(),
                error=type(exc).__name__,
            )


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
