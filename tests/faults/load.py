"""The agent side of the fault suite: many effects with concurrency, every answer kept.

The audit needs to know exactly what each request was told and when, so every answer
(or the lack of one) is recorded with the wall-clock times around it; the target and
the ledger stamp their rows with the same clock. The loop is bounded in count and in
time. After a fault clears, ``retry_until_settled`` sends every unsettled operation
again with the same key and payload, as a well-behaved agent would.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import aiohttp

PROBLEMS = "https://effect-broker.dev/problems/"
MODES = ("idempotent", "reconcilable", "unsafe")
#: Problem types whose answer says that this request sent nothing to the target.
NOTHING_SENT = frozenset({"upstream-unreachable", "upstream-busy", "store-unavailable"})
CLIENT_TIMEOUT = 20.0
MAX_BACKOFF = 0.5


@dataclass(frozen=True)
class Op:
    """One business intent: its key (also the order id at the target) and route."""

    key: str
    mode: str
    amount: int

    @property
    def body(self) -> bytes:
        document = {"amount": self.amount, "currency": "usd", "order_id": self.key}
        return json.dumps(document, sort_keys=True).encode()


@dataclass
class Deadline:
    """When a load loop stops taking new operations (monotonic seconds). A fault test
    moves it once the fault clears, so the bound counts from recovery, not from the
    start: how long a restart takes on a busy machine is not what the test measures."""

    at: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    def extend(self, seconds: float) -> None:
        """At least ``seconds`` from now."""
        self.at = max(self.at, time.monotonic() + seconds)

    @property
    def passed(self) -> bool:
        return time.monotonic() >= self.at


def make_ops(tag: str, count: int, modes: Sequence[str] = MODES) -> list[Op]:
    return [Op(f"{tag}-{i:04d}", modes[i % len(modes)], 100 + i) for i in range(count)]


@dataclass(frozen=True)
class Reply:
    """What one request got back: a status and problem type, or no answer at all."""

    op: Op
    started: float  # time.time() before sending
    finished: float
    status: int | None  # None: the connection failed or the client timed out
    problem: str | None = None
    effect_status: str | None = None
    retry_after: float | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def kind(self) -> str:
        """One label per answer for the tables: ``2xx``, a problem type, or an error."""
        if self.ok:
            return "2xx"
        if self.status is None:
            return f"no answer ({self.error})"
        return f"{self.status} {self.problem}" if self.problem else f"{self.status}"

    @property
    def nothing_sent(self) -> bool:
        return self.problem in NOTHING_SENT

    @property
    def final(self) -> bool:
        """Nothing more to ask for: a 2xx, or an unsafe effect shown unknown."""
        if self.ok:
            return True
        if self.op.mode == "unsafe" and self.problem == "outcome-unknown":
            return self.status == 409  # decided; a 502/504 is this request's own loss
        return self.status is not None and self.status < 500 and self.problem is None


@dataclass
class Agent:
    """Sends operations through the proxy and records every reply."""

    proxy_url: str
    concurrency: int = 8
    timeout: float = CLIENT_TIMEOUT  # seconds a request may take before it is dropped
    replies: list[Reply] = field(default_factory=list)
    answered: int = 0
    #: Cleared while a fault test holds the load (the outage has had the replies it
    #: needs): workers finish what they sent and take no new op until it is set again,
    #: so the operations left are sent after recovery, not spent on a dead proxy.
    flowing: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.flowing.set()

    async def send(self, session: aiohttp.ClientSession, op: Op) -> Reply:
        url = f"{self.proxy_url}/{op.mode}/v1/charges"
        headers = {"Operation-Key": op.key, "Content-Type": "application/json"}
        started = time.time()
        try:
            async with session.post(url, data=op.body, headers=headers) as response:
                body = await response.read()
                reply = Reply(
                    op,
                    started,
                    time.time(),
                    response.status,
                    _problem_type(response.headers.get("Content-Type", ""), body),
                    response.headers.get("Effect-Status"),
                    _seconds(response.headers.get("Retry-After")),
                )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            reply = Reply(op, started, time.time(), None, error=type(exc).__name__)
        self.replies.append(reply)
        self.answered += 1
        return reply

    def session(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.concurrency),
            timeout=aiohttp.ClientTimeout(total=self.timeout),
        )

    async def run(self, ops: Iterable[Op], *, deadline: Deadline) -> list[Op]:
        """Send each op once, ``concurrency`` at a time, until done or ``deadline``
        passes; returns the ops never sent. After a 5xx or no answer a worker
        backs off briefly before its next op, as an agent would."""
        queue: asyncio.Queue[Op] = asyncio.Queue()
        for op in ops:
            queue.put_nowait(op)

        async def worker(session: aiohttp.ClientSession) -> None:
            while not deadline.passed:
                await self.flowing.wait()
                try:
                    op = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                reply = await self.send(session, op)
                if reply.status is None or reply.status >= 500:
                    await asyncio.sleep(_backoff(reply))

        async with self.session() as session:
            await asyncio.gather(*(worker(session) for _ in range(self.concurrency)))
        return [queue.get_nowait() for _ in range(queue.qsize())]

    async def retry_until_settled(self, ops: Sequence[Op], *, seconds: float) -> list[Op]:
        """Send every op whose last reply is not final again, same key and payload,
        until each is final or ``seconds`` pass; returns the ops still not final."""
        last: dict[str, Reply] = {}
        for reply in self.replies:
            last[reply.op.key] = reply
        pending = [op for op in ops if op.key not in last or not last[op.key].final]
        deadline = time.monotonic() + seconds

        async def worker(session: aiohttp.ClientSession, mine: list[Op]) -> list[Op]:
            stuck = []
            for op in mine:
                while True:
                    reply = await self.send(session, op)
                    if reply.final:
                        break
                    if time.monotonic() >= deadline:
                        stuck.append(op)
                        break
                    await asyncio.sleep(_backoff(reply))
            return stuck

        shares = [pending[i :: self.concurrency] for i in range(self.concurrency)]
        async with self.session() as session:
            stuck = await asyncio.gather(*(worker(session, share) for share in shares))
        return [op for share in stuck for op in share]

    def kinds(self, replies: Iterable[Reply] | None = None) -> Counter[str]:
        return Counter(
            reply.kind for reply in (self.replies if replies is None else replies)
        )


async def pass_through(proxy_url: str, target_url: str, count: int) -> list[float]:
    """Unmatched GETs in forward mode, one after another: pass-through, never
    recorded. Returns the seconds each took; every one must be answered 200."""
    took = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as session:
        for _ in range(count):
            started = time.monotonic()
            async with session.get(f"{target_url}/healthz", proxy=proxy_url) as answer:
                assert answer.status == 200, await answer.text()
                await answer.read()
            took.append(time.monotonic() - started)
    return took


def _backoff(reply: Reply) -> float:
    return min(reply.retry_after or 0.1, MAX_BACKOFF)


def _seconds(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _problem_type(content_type: str, body: bytes) -> str | None:
    if not content_type.startswith("application/problem+json"):
        return None
    kind = str(json.loads(body).get("type", ""))
    return kind.removeprefix(PROBLEMS)
