"""What each answer of the target proves, end to end through the proxy.

Covers steps 2, 4, 7 and 8 of the request flow (docs/architecture.md): a missing or
malformed Operation-Key is refused before anything is recorded; a reused key with
another payload is refused with 422; a lost answer becomes ``outcome_unknown`` and is
then handled per safety class (unsafe: never resent; idempotent: resent with the same
derived key; reconcilable: probed after the settlement bound); a refused connection is
retryable; a target's 503 and 4xx are recorded as ``outcome.status_after_answer`` says.
The target's own table is the proof.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, closing
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from effect_broker.server import start_site
from tests.integration.harness import (
    PROBLEMS,
    Answer,
    Broker,
    arm_faults,
    ledger_rows,
    payment_target,
    running_broker,
    serve_app,
)
from tests.integration.proxy_support import charge, closed_port, post


async def until_not_409(url: str, key: str, body: object, *, within: float) -> Answer:
    """Retry as a well-behaved client would, until the proxy stops answering 409."""
    deadline = time.monotonic() + within
    while True:
        answer = await post(url, key=key, body=body)
        if answer.status != 409 or time.monotonic() > deadline:
            return answer
        await asyncio.sleep(0.05)


def assert_outcome_unknown(answer: Answer, status: int) -> str:
    """The honest stop: the problem type, the effect's id and status, in both places."""
    assert answer.status == status, answer
    problem = answer.problem
    assert problem["type"] == PROBLEMS + "outcome-unknown"
    assert answer.headers["Effect-Status"] == "outcome_unknown"
    assert problem["effect_status"] == "outcome_unknown"
    assert problem["effect_id"] == answer.headers["Effect-Id"]
    return answer.headers["Effect-Id"]


# --------------------------------------------------------------------- the operation key


@pytest.mark.parametrize(
    ("headers", "problem_type"),
    [
        pytest.param([], "missing-operation-key", id="missing"),
        pytest.param([("Operation-Key", "")], "missing-operation-key", id="empty"),
        pytest.param([("Operation-Key", "k" * 256)], "invalid-operation-key", id="256"),
        pytest.param(
            [("Operation-Key", "order-1\tcharge")], "invalid-operation-key", id="tab"
        ),
        pytest.param(
            [("Operation-Key", "a"), ("Operation-Key", "b")],
            "invalid-operation-key",
            id="twice",
        ),
    ],
)
async def test_a_missing_or_malformed_operation_key_is_refused_before_anything(
    broker: Broker,
    database_url: str,
    headers: list[tuple[str, str]],
    problem_type: str,
) -> None:
    answer = await post(
        f"{broker.proxy_url}/payments/v1/charges",
        key=None,
        body=charge("order-1"),
        extra=headers,
    )

    assert answer.status == 400
    assert answer.problem["type"] == PROBLEMS + problem_type
    assert answer.problem["status"] == 400
    assert broker.charges() == []
    assert await ledger_rows(database_url) == []


async def test_a_key_of_exactly_255_characters_is_accepted(broker: Broker) -> None:
    answer = await post(
        f"{broker.proxy_url}/payments/v1/charges", key="k" * 255, body=charge("order-1")
    )

    assert answer.status == 201
    assert len(broker.charges("order-1")) == 1


# --------------------------------------------------------------------- payload drift


async def test_the_same_key_with_another_payload_is_refused_and_changes_nothing(
    broker: Broker,
) -> None:
    url = f"{broker.proxy_url}/payments/v1/charges"
    first = await post(url, key="order-2:charge", body=charge("order-2"))

    drifted = await post(url, key="order-2:charge", body=charge("order-2", amount=2000))
    again = await post(url, key="order-2:charge", body=charge("order-2"))

    assert first.status == 201
    assert drifted.status == 422
    assert drifted.problem["type"] == PROBLEMS + "payload-mismatch"
    assert drifted.headers["Effect-Id"] == first.headers["Effect-Id"]
    assert drifted.headers["Effect-Status"] == "succeeded"
    assert (again.status, again.body) == (201, first.body)
    assert again.headers["Idempotent-Replayed"] == "true"
    [row] = broker.charges("order-2")
    assert row["amount"] == 1000


# --------------------------------------------------------------------- lost answers


async def test_unsafe_lost_answer_is_outcome_unknown_and_never_resent(
    database_url: str, tmp_path: Path
) -> None:
    async with running_broker(database_url, tmp_path, timeout="500ms") as broker:
        url = f"{broker.proxy_url}/email/v1/charges"
        await arm_faults(broker, hang_after_commit=1)

        first = await post(url, key="order-3:email", body=charge("order-3"))
        retry = await post(url, key="order-3:email", body=charge("order-3"))

        effect_id = assert_outcome_unknown(first, 504)
        assert assert_outcome_unknown(retry, 409) == effect_id
        assert len(broker.charges("order-3")) == 1


async def test_idempotent_lost_answer_is_resent_with_the_same_key_and_charged_once(
    database_url: str, tmp_path: Path
) -> None:
    async with running_broker(database_url, tmp_path, timeout="500ms") as broker:
        url = f"{broker.proxy_url}/payments/v1/charges"
        await arm_faults(broker, hang_after_commit=1)

        first = await post(url, key="order-4:charge", body=charge("order-4"))
        retry = await post(url, key="order-4:charge", body=charge("order-4"))
        replay = await post(url, key="order-4:charge", body=charge("order-4"))

        effect_id = assert_outcome_unknown(first, 504)
        # Title and detail agree: a retry with the same key is safe, and it happens.
        assert "will not be retried" not in first.problem["title"]
        assert "same Operation-Key is safe" in first.problem["detail"]
        assert retry.status == 201
        assert retry.headers["Effect-Id"] == effect_id
        assert retry.headers["Effect-Status"] == "succeeded"
        [row] = broker.charges("order-4")
        assert json.loads(retry.body)["id"] == row["id"]
        assert (replay.status, replay.body) == (201, retry.body)
        [effect] = await ledger_rows(database_url)
        assert (effect["status"], effect["attempts"]) == ("succeeded", 2)


async def test_reconcilable_lost_answer_waits_for_the_bound_then_is_found_by_probe(
    database_url: str, tmp_path: Path
) -> None:
    """The bound counts from when the answer was lost, not from the send: with a timeout
    longer than the bound, an immediate retry still waits; a later one is answered
    from the target's lookup without sending the charge again."""
    async with running_broker(
        database_url, tmp_path, timeout="500ms", settlement_bound="300ms"
    ) as broker:
        url = f"{broker.proxy_url}/tickets/v1/charges"
        await arm_faults(broker, hang_after_commit=1)

        first = await post(url, key="order-5:ticket", body=charge("order-5"))
        early = await post(url, key="order-5:ticket", body=charge("order-5"))

        effect_id = assert_outcome_unknown(first, 504)
        assert assert_outcome_unknown(early, 409) == effect_id
        assert early.headers["Retry-After"] == "1"  # the 300ms bound, rounded up
        assert early.problem["retry_after_seconds"] == int(early.headers["Retry-After"])

        settled = await until_not_409(url, "order-5:ticket", charge("order-5"), within=5)
        replay = await post(url, key="order-5:ticket", body=charge("order-5"))

        assert settled.status in (200, 201), settled
        assert settled.headers["Effect-Id"] == effect_id
        assert settled.headers["Effect-Status"] == "succeeded"
        [row] = broker.charges("order-5")
        assert json.loads(settled.body)["id"] == row["id"]
        assert (replay.status, replay.body) == (settled.status, settled.body)
        [effect] = await ledger_rows(database_url)
        assert effect["attempts"] == 1  # found by the probe, never sent again


@dataclass
class LateTarget:
    """A reconcilable target whose commit lands late in the attempt.

    The first POST commits after ``commit_after`` seconds and then never answers; the
    lookup shows a commit ``settlement_delay`` seconds after it, as the contract says.
    """

    commit_after: float
    settlement_delay: float
    commits: list[tuple[str, float]] = field(default_factory=list)
    released: asyncio.Event = field(default_factory=asyncio.Event)

    async def create(self, request: web.Request) -> web.Response:
        correlation = request.headers["X-Correlation-Id"]
        first = not self.commits
        if first:
            await asyncio.sleep(self.commit_after)  # the target is slow, not the test
        self.commits.append((correlation, time.monotonic()))
        if first:
            await self.released.wait()
        return web.json_response({"id": f"t{len(self.commits)}"}, status=201)

    async def lookup(self, request: web.Request) -> web.Response:
        settled = time.monotonic() - self.settlement_delay
        for number, (correlation, at) in enumerate(self.commits, start=1):
            if correlation == request.query["correlation_id"] and at <= settled:
                return web.json_response({"id": f"t{number}"})
        return web.json_response({"error": "not found"}, status=404)


@asynccontextmanager
async def late_target(
    commit_after: float, settlement_delay: float
) -> AsyncIterator[tuple[str, LateTarget]]:
    target = LateTarget(commit_after, settlement_delay)
    app = web.Application()
    app.router.add_post("/v1/charges", target.create)
    app.router.add_get("/v1/charges", target.lookup)
    async with serve_app(app) as url:
        try:
            yield url, target
        finally:
            target.released.set()  # before the site stops: let the hung handler end


LATE_ROUTES = """\
version: 1
contracts:
  - name: tickets.create
    version: "1"
    safety: reconcilable
    correlation_header: X-Correlation-Id
    settlement_bound: 300ms
    timeout: 600ms
    probe:
      method: GET
      path: /v1/charges?correlation_id={{downstream_key}}
      found: {{status: [200], external_id: /id}}
      absent: {{status: [404]}}
routes:
  - name: tickets
    match: {{method: POST, path: /tickets/v1/charges}}
    strip_prefix: /tickets
    upstream: {upstream}
    contract: tickets.create
"""


async def test_reconcilable_commit_late_in_the_attempt_is_not_sent_twice(
    database_url: str, tmp_path: Path
) -> None:
    """A commit at 450ms of a 600ms timeout is visible 300ms later, as the contract
    promises; a probe timed from the send would see "absent" and charge twice."""
    async with (
        late_target(commit_after=0.45, settlement_delay=0.3) as (
            upstream,
            target,
        ),
        running_broker(
            database_url, tmp_path, routes=lambda _: LATE_ROUTES.format(upstream=upstream)
        ) as broker,
    ):
        url = f"{broker.proxy_url}/tickets/v1/charges"

        first = await post(url, key="order-7:ticket", body=charge("order-7"))
        settled = await until_not_409(url, "order-7:ticket", charge("order-7"), within=5)

        assert_outcome_unknown(first, 504)
        assert settled.status in (200, 201), settled
        assert len(target.commits) == 1, target.commits


# --------------------------------------------------------------------- refused connection


REFUSED_ROUTES = """\
version: 1
contracts:
  - name: payments.charge
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 1h
    timeout: 2s
  - name: email.send
    version: "1"
    safety: unsafe
    timeout: 2s
routes:
  - name: late-payments
    match: {{method: POST, path: /late-payments/v1/charges}}
    strip_prefix: /late-payments
    upstream: {upstream}/idempotent
    contract: payments.charge
  - name: late-email
    match: {{method: POST, path: /late-email/v1/charges}}
    strip_prefix: /late-email
    upstream: {upstream}/unsafe
    contract: email.send
"""


def count_charges(db: Path, order_id: str) -> int:
    with closing(sqlite3.connect(db)) as conn:
        (count,) = conn.execute(
            "SELECT count(*) FROM charges WHERE order_id = ?", (order_id,)
        ).fetchone()
    return int(count)


@pytest.mark.parametrize("prefix", ["late-payments", "late-email"])
async def test_a_refused_connection_is_retryable_and_a_later_retry_charges_once(
    database_url: str, tmp_path: Path, prefix: str
) -> None:
    """Even an unsafe effect may be resent: a refused connect proves nothing left."""
    port = closed_port()
    upstream = f"http://127.0.0.1:{port}"
    async with (
        running_broker(
            database_url,
            tmp_path,
            routes=lambda _: REFUSED_ROUTES.format(upstream=upstream),
        ) as broker,
        AsyncExitStack() as late,
    ):
        url = f"{broker.proxy_url}/{prefix}/v1/charges"
        refused = await post(url, key="order-8:charge", body=charge("order-8"))

        assert refused.status == 502
        assert refused.problem["type"] == PROBLEMS + "upstream-unreachable"
        assert refused.headers["Effect-Status"] == "retryable"
        assert refused.problem["effect_id"] == refused.headers["Effect-Id"]
        assert "Retry-After" in refused.headers

        db = tmp_path / "late-target.sqlite3"
        app = payment_target.build_app(db, settlement_delay=0.0, key_retention=3600.0)
        await start_site(late, app, f"127.0.0.1:{port}")
        retry = await post(url, key="order-8:charge", body=charge("order-8"))
        replay = await post(url, key="order-8:charge", body=charge("order-8"))

        assert retry.status == 201
        assert retry.headers["Effect-Id"] == refused.headers["Effect-Id"]
        assert retry.headers["Effect-Status"] == "succeeded"
        assert (replay.status, replay.body) == (201, retry.body)
        assert count_charges(db, "order-8") == 1


# --------------------------------------------------------------------- target refusals


async def test_idempotent_503_passes_through_as_retryable_and_a_retry_charges_once(
    broker: Broker, database_url: str
) -> None:
    """status_after_answer: 503 from a keyed target is RETRYABLE; the answer is shown."""
    url = f"{broker.proxy_url}/payments/v1/charges"
    await arm_faults(broker, fail_before_commit=1)

    refused = await post(url, key="order-9:charge", body=charge("order-9"))

    assert refused.status == 503
    assert json.loads(refused.body) == {"error": "unavailable"}
    assert refused.headers["Effect-Status"] == "retryable"
    assert broker.charges("order-9") == []

    retry = await post(url, key="order-9:charge", body=charge("order-9"))

    assert retry.status == 201
    assert retry.headers["Effect-Id"] == refused.headers["Effect-Id"]
    assert len(broker.charges("order-9")) == 1
    [effect] = await ledger_rows(database_url)
    assert (effect["status"], effect["attempts"]) == ("succeeded", 2)


async def test_unsafe_503_proves_nothing_and_is_never_resent(broker: Broker) -> None:
    """status_after_answer: a 5xx from an unkeyed target becomes OUTCOME_UNKNOWN."""
    url = f"{broker.proxy_url}/email/v1/charges"
    await arm_faults(broker, fail_before_commit=1)

    first = await post(url, key="order-10:email", body=charge("order-10"))
    retry = await post(url, key="order-10:email", body=charge("order-10"))

    effect_id = assert_outcome_unknown(first, 502)
    assert assert_outcome_unknown(retry, 409) == effect_id
    assert broker.charges("order-10") == []


async def test_reconcilable_503_is_probed_absent_after_the_bound_then_sent_once(
    database_url: str, tmp_path: Path
) -> None:
    async with running_broker(database_url, tmp_path, settlement_bound="1s") as broker:
        url = f"{broker.proxy_url}/tickets/v1/charges"
        await arm_faults(broker, fail_before_commit=1)

        first = await post(url, key="order-11:ticket", body=charge("order-11"))
        early = await post(url, key="order-11:ticket", body=charge("order-11"))

        effect_id = assert_outcome_unknown(first, 502)
        assert assert_outcome_unknown(early, 409) == effect_id
        assert "Retry-After" in early.headers
        assert broker.charges("order-11") == []

        sent = await until_not_409(url, "order-11:ticket", charge("order-11"), within=5)

        assert sent.status == 201, sent
        assert sent.headers["Effect-Id"] == effect_id
        [row] = broker.charges("order-11")
        assert json.loads(sent.body)["id"] == row["id"]


async def test_a_target_4xx_is_final_and_replayed_as_is(
    broker: Broker, database_url: str
) -> None:
    url = f"{broker.proxy_url}/payments/v1/charges"
    invalid = {"amount": -1, "currency": "usd", "order_id": "order-12"}

    first = await post(url, key="order-12:charge", body=invalid)
    retry = await post(url, key="order-12:charge", body=invalid)

    assert first.status == 400
    assert b"amount must be a positive integer" in first.body
    assert first.headers["Effect-Status"] == "failed_final"
    assert "Idempotent-Replayed" not in first.headers
    assert (retry.status, retry.body) == (400, first.body)
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.headers["Effect-Status"] == "failed_final"
    assert broker.charges("order-12") == []
    [effect] = await ledger_rows(database_url)
    assert (effect["status"], effect["attempts"]) == ("failed_final", 1)
