"""The scripted agent of the crash matrix: one charge, retried the way real clients retry.

Agents, workflow engines and queues all do the same thing after a failure: they try
again. This agent wants exactly one thing, a charge of 42.00 USD for ``order-42``, and it
keeps asking until it gets a final answer. Two ways to ask:

through the proxy (the default)
    ``POST {proxy}/{mode}/v1/charges`` with ``Operation-Key: order-42:charge``, the same
    key on every attempt. It retries after a connection error or reset, a 5xx, and a 409
    that carries ``Retry-After`` (honoured, capped small). It stops at a 2xx or other
    4xx (a final answer, replayed or not), or at a 409 ``outcome-unknown`` problem with
    no ``Retry-After``: the proxy saying honestly that the target cannot prove what
    happened and that it will not send again. Retrying past that would be pointless.

naively (``--naive``)
    ``POST {target}/{mode}/v1/charges`` directly, with a *fresh* random
    ``Idempotency-Key``, ``X-Correlation-Id`` or ``Effect-Attempt-Key`` per attempt and
    a 1 s client timeout.
    This is the everyday client that double-charges: when the target commits but the
    answer is late, the timeout fires, and the retry looks like a new charge.

Importable (``run_agent`` / ``charge``, returning an ``AgentResult``) and runnable
(``main``; from a checkout, through ``examples/crash_matrix/agent.py``)::

    python examples/crash_matrix/agent.py --proxy http://127.0.0.1:8080 --mode idempotent
    python examples/crash_matrix/agent.py --naive --target http://127.0.0.1:9000 \\
        --mode unsafe

Each run prints one JSON line. It needs only aiohttp.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import aiohttp

MODES = ("idempotent", "reconcilable", "unsafe", "transactional")
CHARGE: dict[str, Any] = {"amount": 4200, "currency": "usd", "order_id": "order-42"}
ORDER_ID = "order-42"
OPERATION_KEY = "order-42:charge"

#: How long one naive attempt waits: the everyday client's impatience.
NAIVE_TIMEOUT = 1.0
#: How long one attempt through the proxy waits. The proxy answers within the contract
#: timeout (about 1 s in the matrix) unless it is dead or frozen, so this is generous.
PROXY_TIMEOUT = 20.0
#: Pause after a failure that carries no Retry-After: short, the matrix is impatient.
PAUSE = 0.1

Outcome = Literal["answered", "outcome_unknown", "deadline"]


@dataclass(frozen=True)
class AgentResult:
    """What the agent finally got, and how it got there.

    ``outcome`` is ``answered`` (a final 2xx/4xx), ``outcome_unknown`` (the proxy's
    honest stop) or ``deadline`` (it gave up asking). ``history`` has one short line
    per attempt, e.g. ``reset``, ``409 in-flight retry-after=1``, ``201 replayed``.
    """

    mode: str
    naive: bool
    outcome: Outcome
    status: int | None
    replayed: bool
    effect_status: str | None
    charge_id: str | None
    body: str | None
    attempts: int
    history: tuple[str, ...]
    seconds: float

    @property
    def final_2xx(self) -> bool:
        return (
            self.outcome == "answered"
            and self.status is not None
            and (200 <= self.status < 300)
        )

    def as_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass(frozen=True)
class _Answer:
    """One HTTP answer, reduced to what decides the next step."""

    status: int
    problem_type: str | None
    retry_after: float | None
    replayed: bool
    effect_status: str | None
    body: str


def problem_type(body: str, content_type: str) -> str | None:
    """The short problem type (``outcome-unknown``) of an RFC 9457 body, if it is one."""
    if "problem+json" not in content_type:
        return None
    try:
        document = json.loads(body)
    except ValueError:
        return None
    kind = document.get("type") if isinstance(document, dict) else None
    return kind.rstrip("/").rsplit("/", 1)[-1] if isinstance(kind, str) else None


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: this agent does not bother, it treats it as absent


def _charge_id(body: str) -> str | None:
    try:
        document = json.loads(body)
    except ValueError:
        return None
    found = document.get("id") if isinstance(document, dict) else None
    return found if isinstance(found, str) else None


def _headers(mode: str, naive: bool) -> dict[str, str]:
    """Through the proxy: the stable operation key. Naive: a fresh key every time,
    which is exactly the mistake that turns a retry into a second charge."""
    if not naive:
        return {"Operation-Key": OPERATION_KEY}
    fresh = str(uuid.uuid4())
    if mode == "idempotent":
        return {"Idempotency-Key": fresh}
    if mode == "reconcilable":
        return {"X-Correlation-Id": fresh}
    if mode == "transactional":  # the kit's attempt key, fresh: a new attempt each time
        return {"Effect-Attempt-Key": fresh.replace("-", "")}
    return {}


async def _attempt(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str], timeout: float
) -> _Answer:
    async with session.post(
        url,
        json=CHARGE,
        headers=headers,
        timeout=aiohttp.ClientTimeout(total=timeout),
    ) as response:
        body = await response.text()
        return _Answer(
            status=response.status,
            problem_type=problem_type(body, response.headers.get("Content-Type", "")),
            retry_after=_retry_after(response.headers.get("Retry-After")),
            replayed=response.headers.get("Idempotent-Replayed") == "true",
            effect_status=response.headers.get("Effect-Status"),
            body=body,
        )


def _describe(answer: _Answer) -> str:
    parts = [str(answer.status)]
    if answer.problem_type:
        parts.append(answer.problem_type)
    if answer.retry_after is not None:
        parts.append(f"retry-after={answer.retry_after:g}")
    if answer.replayed:
        parts.append("replayed")
    return " ".join(parts)


def _next_pause(answer: _Answer, retry_after_cap: float) -> float | None:
    """How long to wait before the next attempt; None when this answer is final."""
    if answer.status >= 500:
        return PAUSE
    if answer.status in (409, 429) and answer.retry_after is not None:
        return min(answer.retry_after, retry_after_cap)
    return None


async def run_agent(
    url: str,
    mode: str,
    *,
    naive: bool = False,
    deadline: float = 30.0,
    attempt_timeout: float | None = None,
    retry_after_cap: float = 1.0,
) -> AgentResult:
    """Ask for the charge at ``url`` (the proxy, or the target when ``naive``) until a
    final answer, the proxy's honest ``outcome-unknown`` stop, or ``deadline`` seconds.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    endpoint = f"{url.rstrip('/')}/{mode}/v1/charges"
    timeout = attempt_timeout or (NAIVE_TIMEOUT if naive else PROXY_TIMEOUT)
    started = time.monotonic()
    history: list[str] = []
    last: _Answer | None = None
    # One fresh connection per attempt: a pooled keep-alive socket to a proxy that was
    # just killed would only add a confusing extra failure.
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        while True:
            pause = PAUSE
            try:
                last = await _attempt(session, endpoint, _headers(mode, naive), timeout)
            except aiohttp.ClientConnectorError:
                history.append("refused")
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                history.append("reset")
            except aiohttp.ClientPayloadError:
                history.append("reset mid-body")
            except TimeoutError:
                history.append(f"timeout after {timeout:g}s")
            else:
                history.append(_describe(last))
                if (
                    last.status == 409
                    and last.problem_type == "outcome-unknown"
                    and (last.retry_after is None)
                ):
                    return _result(mode, naive, "outcome_unknown", last, history, started)
                next_pause = _next_pause(last, retry_after_cap)
                if next_pause is None:
                    return _result(mode, naive, "answered", last, history, started)
                pause = next_pause
            if time.monotonic() - started + pause >= deadline:
                return _result(mode, naive, "deadline", last, history, started)
            await asyncio.sleep(pause)  # a retry's backoff, not synchronisation


def _result(
    mode: str,
    naive: bool,
    outcome: Outcome,
    last: _Answer | None,
    history: list[str],
    started: float,
) -> AgentResult:
    return AgentResult(
        mode=mode,
        naive=naive,
        outcome=outcome,
        status=last.status if last else None,
        replayed=last.replayed if last else False,
        effect_status=last.effect_status if last else None,
        charge_id=_charge_id(last.body) if last else None,
        body=last.body if last else None,
        attempts=len(history),
        history=tuple(history),
        seconds=round(time.monotonic() - started, 3),
    )


def charge(
    url: str, mode: str, *, naive: bool = False, deadline: float = 30.0
) -> AgentResult:
    """``run_agent`` for synchronous callers."""
    return asyncio.run(run_agent(url, mode, naive=naive, deadline=deadline))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--proxy", metavar="URL", help="effect-broker's proxy port")
    where.add_argument("--target", metavar="URL", help="the payment target (--naive)")
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument(
        "--naive",
        action="store_true",
        help="skip the proxy: fresh key per attempt, 1 s timeout",
    )
    parser.add_argument("--deadline", type=float, default=30.0, metavar="SECONDS")
    args = parser.parse_args(argv)
    if args.naive != (args.target is not None):
        parser.error("--naive goes with --target, and --target with --naive")
    result = charge(
        args.proxy or args.target, args.mode, naive=args.naive, deadline=args.deadline
    )
    print(result.as_json(), flush=True)
