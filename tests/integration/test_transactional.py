"""safety: transactional end to end: a real proxy, a real ledger, a target speaking the
kit's protocol, and the target's own entries as the proof.

The target below is a minimal honest implementation of the kit's promise, in memory:
one row per attempt key under a lock, so an attempt's commit (entry + receipt) and a
tombstone exclude each other exactly as the kit's unique key makes them do in
PostgreSQL. Each test scripts how the next attempts behave (commit and lose the answer,
refuse without committing, hang with the transaction open) and how the kit's lookup
answers, then counts what the target really committed.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiohttp import web

from effect_broker.reconciler import Reconciler
from effect_broker.target.protocol import (
    ATTEMPT_KEY_HEADER,
    SECRET_HEADER,
    WELL_KNOWN_PREFIX,
    AttemptReport,
    AttemptState,
    StoredAnswer,
    attempt_key,
)
from tests.integration.harness import Answer, Broker, request, running_broker, serve_app

SECRET = "kit-shared-secret"
ADMIN_TOKEN = "admin-token-for-tests"
ROUTES = """\
version: 1
contracts:
  - name: ledger.post
    version: "1"
    safety: transactional
    timeout: 400ms
    retry_limit: {retry_limit}
routes:
  - name: ledger
    match: {{method: POST, path: /ledger/v1/entries}}
    strip_prefix: /ledger
    upstream: {kit}/base
    contract: ledger.post
    inject_headers: {{{secret_header}: {secret}}}
"""

Behaviour = str  # how one attempt behaves; see KitTarget.attempt
Override = Callable[[str], Awaitable[web.Response]]


@dataclass
class KitTarget:
    """The target: its entries, its per-key rows, and what it was asked."""

    rows: dict[str, AttemptReport] = field(default_factory=dict)
    entries: list[dict[str, Any]] = field(default_factory=list)
    attempt_keys: list[str] = field(default_factory=list)  # mutating requests, in order
    lookups: list[str] = field(default_factory=list)
    tombstones: list[str] = field(default_factory=list)
    script: deque[Behaviour] = field(default_factory=deque)
    lookup_override: Override | None = None
    tombstone_override: Override | None = None
    # "attempt": a tombstone arriving while an attempt holds its transaction open
    # waits for that attempt to commit (and is refused); "tombstone": it goes first.
    race_winner: str = "tombstone"
    secret: str = SECRET  # what the kit demands in the shared secret header
    pending: dict[str, asyncio.Event] = field(default_factory=dict)  # open transactions
    tried: dict[str, asyncio.Event] = field(
        default_factory=dict
    )  # ... that tried to commit
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    released: asyncio.Event = field(default_factory=asyncio.Event)
    late_commit_refused: asyncio.Event = field(default_factory=asyncio.Event)

    def app(self) -> web.Application:
        app = web.Application()
        # The route's upstream has a base path; the kit's endpoints are at the origin's
        # root all the same, as every /.well-known/ location is (RFC 8615).
        app.router.add_post("/base/v1/entries", self.attempt)
        app.router.add_get(WELL_KNOWN_PREFIX + "{key}", self.look)
        app.router.add_put(WELL_KNOWN_PREFIX + "{key}/tombstone", self.bury)
        return app

    async def attempt(self, request: web.Request) -> web.Response:
        """One attempt: ``ok`` commits and answers 201; ``commit_then_500`` and
        ``commit_then_hang`` commit and lose the answer; ``refuse_503`` commits
        nothing; ``hang_open`` holds its transaction open until a tombstone races it
        (``race_winner``) or the test releases it."""
        key = request.headers[ATTEMPT_KEY_HEADER]
        self.attempt_keys.append(key)
        body = await request.json()
        behaviour = self.script.popleft() if self.script else "ok"
        if behaviour == "refuse_503":
            return web.json_response({"error": "try later"}, status=503)
        if behaviour == "hang_open":
            opened = self.pending[key] = asyncio.Event()
            tried = self.tried[key] = asyncio.Event()
            await opened.wait()  # a racing tombstone or the end of the test
            if not await self._commit(key, body):
                self.late_commit_refused.set()
            tried.set()
            await self.released.wait()
            return web.json_response({"late": True}, status=201)
        answer = await self._commit(key, body)
        if answer is None:  # the key's row is a tombstone: the kit refuses the attempt
            return web.json_response(self.rows[key].to_json(), status=409)
        if behaviour == "commit_then_500":
            return web.json_response({"error": "lost"}, status=500)
        if behaviour == "commit_then_hang":
            await self.released.wait()
        return web.Response(
            status=answer.status, body=answer.body, headers=dict(answer.headers)
        )

    async def _commit(self, key: str, body: dict[str, Any]) -> StoredAnswer | None:
        """The entry and its receipt in one step, unless the key's row exists."""
        async with self.lock:
            if key in self.rows:
                return None
            entry = {"id": f"entry-{len(self.entries) + 1}", **body}
            answer = StoredAnswer(
                201, {"Content-Type": "application/json"}, json.dumps(entry).encode()
            )
            self.entries.append(entry)
            self.rows[key] = AttemptReport(key, AttemptState.COMMITTED, _now(), answer)
            return answer

    async def look(self, request: web.Request) -> web.Response:
        key = request.match_info["key"]
        self.lookups.append(key)
        if request.headers.get(SECRET_HEADER) != self.secret:
            return web.json_response({"error": "secret"}, status=401)
        if self.lookup_override is not None:
            return await self.lookup_override(key)
        async with self.lock:
            row = self.rows.get(key)
        if row is None:
            absent = AttemptReport(key, AttemptState.ABSENT)
            return web.json_response(absent.to_json(), status=404)
        return web.json_response(row.to_json(), status=200)

    async def bury(self, request: web.Request) -> web.Response:
        key = request.match_info["key"]
        self.tombstones.append(key)
        if request.headers.get(SECRET_HEADER) != self.secret:
            return web.json_response({"error": "secret"}, status=401)
        if self.tombstone_override is not None:
            return await self.tombstone_override(key)
        opened = self.pending.get(key)
        if opened is not None and self.race_winner == "attempt":
            opened.set()  # the open transaction commits first; the tombstone waits
            await self.tried[key].wait()
        async with self.lock:
            row = self.rows.get(key)
            if row is None:
                row = self.rows[key] = AttemptReport(key, AttemptState.TOMBSTONED, _now())
                status = 201
            else:
                status = 409 if row.state is AttemptState.COMMITTED else 200
        if opened is not None:
            opened.set()  # the losing transaction now tries to commit, and fails
        return web.json_response(row.to_json(), status=status)


def _now() -> str:
    return datetime.now(UTC).isoformat()


@asynccontextmanager
async def transactional(
    database_url: str, tmp_path: Path, *, retry_limit: int = 3
) -> AsyncIterator[tuple[Broker, KitTarget]]:
    kit = KitTarget()
    async with serve_app(kit.app()) as kit_url:
        routes = ROUTES.format(
            kit=kit_url,
            retry_limit=retry_limit,
            secret_header=SECRET_HEADER,
            secret=SECRET,
        )
        try:
            async with running_broker(
                database_url,
                tmp_path,
                routes=lambda _: routes,
                admin_token=ADMIN_TOKEN,
            ) as broker:
                yield broker, kit
        finally:
            kit.released.set()
            for opened in kit.pending.values():
                opened.set()


async def post(
    broker: Broker, key: str = "invoice-7:post", *, prefer: str | None = None
) -> Answer:
    headers = {"Operation-Key": key, "Content-Type": "application/json"}
    if prefer is not None:
        headers["Prefer"] = prefer
    return await request(
        "POST",
        f"{broker.proxy_url}/ledger/v1/entries",
        data=json.dumps({"invoice": key, "amount": 700}),
        headers=headers,
    )


async def the_effect(database_url: str) -> asyncpg.Record:
    conn = await asyncpg.connect(database_url)
    try:
        [row] = await conn.fetch(
            "SELECT e.status, e.attempts, e.downstream_key, r.source, r.status_code "
            "FROM effects e LEFT JOIN effect_receipts r USING (tenant_id, effect_id)"
        )
        return row
    finally:
        await conn.close()


async def history(broker: Broker, effect_id: str) -> list[dict[str, Any]]:
    answer = await request(
        "GET",
        f"{broker.admin_url}/v1/effects/{effect_id}",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
    )
    assert answer.status == 200, answer
    events: list[dict[str, Any]] = answer.json["history"]
    return events


def metric(broker: Broker, name: str, **labels: str) -> float:
    value = broker.state.metrics.registry.get_sample_value(name, labels)
    return value or 0.0


async def reconcile(broker: Broker) -> None:
    """One reconciler pass: the lost effect is due at once, so one pass settles it."""
    await Reconciler(broker.state.engine).run_once()


async def due_now(broker: Broker) -> None:
    """Skip the backoff an inconclusive lookup set: the next reconciler pass takes it."""
    [effect] = (await broker.state.store.list_effects("acme")).effects
    await broker.state.store.reschedule(effect, delay=timedelta(0), actor="test")


def assert_unknown(answer: Answer) -> None:
    assert answer.headers["Effect-Status"] == "outcome_unknown", answer
    assert answer.problem["type"].endswith("outcome-unknown")


# -------------------------------------------------------------- committed, answer lost


@pytest.mark.parametrize("loss", ["commit_then_500", "commit_then_hang"])
async def test_a_lost_answer_is_found_by_the_lookup_on_a_client_retry(
    database_url: str, tmp_path: Path, loss: str
) -> None:
    async with transactional(database_url, tmp_path) as (broker, kit):
        kit.script.append(loss)
        lost = await post(broker)
        assert lost.status == (502 if loss == "commit_then_500" else 504)
        assert_unknown(lost)
        assert "looks the attempt up" in lost.problem["detail"]

        retry = await post(broker)

        assert retry.status == 201, retry
        assert retry.headers["Idempotent-Replayed"] == "true"
        assert retry.headers["Effect-Status"] == "succeeded"
        assert retry.json["id"] == "entry-1"
        assert len(kit.entries) == 1
        assert len(kit.attempt_keys) == 1, "nothing was sent again"
        assert kit.tombstones == []
        effect = await the_effect(database_url)
        assert kit.attempt_keys == [attempt_key(effect["downstream_key"], 1)]
        assert kit.lookups == kit.attempt_keys
        assert (effect["status"], effect["source"], effect["attempts"]) == (
            "succeeded",
            "lookup",
            1,
        )
        again = await post(broker)
        assert (again.status, again.body) == (201, retry.body)
        assert len(kit.attempt_keys) == 1
        assert metric(
            broker, "effect_broker_probes_total", route="ledger", result="found"
        )


async def test_the_reconciler_settles_a_lost_answer_by_lookup_alone(
    database_url: str, tmp_path: Path
) -> None:
    async with transactional(database_url, tmp_path) as (broker, kit):
        kit.script.append("commit_then_hang")
        lost = await post(broker)
        assert lost.status == 504

        await reconcile(broker)

        effect = await the_effect(database_url)
        assert (effect["status"], effect["source"]) == ("succeeded", "lookup")
        assert len(kit.attempt_keys) == 1 and len(kit.entries) == 1
        replay = await post(broker)
        assert replay.status == 201 and replay.json["id"] == "entry-1"
        events = await history(broker, lost.headers["Effect-Id"])
        settled = events[-1]
        assert (settled["kind"], settled["to"]) == ("settled", "succeeded")
        assert settled["details"]["attempt"] == 1
        assert settled["details"]["attempt_key"] == kit.attempt_keys[0]
        assert settled["details"]["committed_at"]
        assert settled["details"]["source"] == "lookup"


# --------------------------------------------------------- never committed: tombstone


@pytest.mark.parametrize("path", ["client", "reconciler"])
async def test_an_attempt_that_too_late_committed_is_tombstoned_then_sent_under_a_new_key(
    database_url: str, tmp_path: Path, path: str
) -> None:
    async with transactional(database_url, tmp_path) as (broker, kit):
        kit.script.append("refuse_503")
        refused = await post(broker)
        assert refused.status == 502
        assert_unknown(refused)

        if path == "client":
            retry = await post(broker)
            assert retry.status == 201, retry
            assert retry.headers["Effect-Status"] == "succeeded"
        else:
            await reconcile(broker)
            retry = await post(broker)
            assert retry.status == 201 and retry.headers["Idempotent-Replayed"] == "true"

        effect = await the_effect(database_url)
        first, second = (attempt_key(effect["downstream_key"], n) for n in (1, 2))
        assert kit.attempt_keys == [first, second]
        assert kit.tombstones == [first]
        assert kit.rows[first].state is AttemptState.TOMBSTONED
        assert len(kit.entries) == 1
        assert (effect["status"], effect["attempts"], effect["source"]) == (
            "succeeded",
            2,
            "response",
        )
        events = await history(broker, refused.headers["Effect-Id"])
        [proof] = [event for event in events if event["kind"] == "absence_proven"]
        assert (proof["from"], proof["to"]) == ("reconciling", "retryable")
        assert proof["details"] == {
            "attempt": 1,
            "attempt_key": first,
            "tombstoned_at": kit.rows[first].at,
            "tombstone": "written",
        }
        assert (
            metric(
                broker, "effect_broker_tombstones_total", route="ledger", result="written"
            )
            == 1
        )


async def test_a_tombstone_refused_because_the_attempt_committed_gives_its_receipt(
    database_url: str, tmp_path: Path
) -> None:
    """The attempt held its transaction open past the timeout; the lookup found nothing
    yet; the attempt then committed first, so the kit refuses the tombstone with the
    attempt's receipt, and that is what the client gets: nothing is sent again."""
    async with transactional(database_url, tmp_path) as (broker, kit):
        kit.script.append("hang_open")
        kit.race_winner = "attempt"
        lost = await post(broker)
        assert lost.status == 504

        retry = await post(broker)

        assert retry.status == 201 and retry.json["id"] == "entry-1", retry
        assert len(kit.attempt_keys) == 1 and len(kit.entries) == 1
        assert kit.tombstones == kit.attempt_keys
        effect = await the_effect(database_url)
        assert (effect["status"], effect["source"]) == ("succeeded", "lookup")
        assert (
            metric(
                broker, "effect_broker_tombstones_total", route="ledger", result="refused"
            )
            == 1
        )


async def test_a_tombstone_that_wins_the_race_leaves_exactly_one_commit(
    database_url: str, tmp_path: Path
) -> None:
    """The attempt holds its transaction open; the tombstone goes first, so the
    attempt's own commit fails when it finally tries, and attempt 2 commits once."""
    async with transactional(database_url, tmp_path) as (broker, kit):
        kit.script.append("hang_open")
        lost = await post(broker)
        assert lost.status == 504

        retry = await post(broker)
        await kit.late_commit_refused.wait()

        assert retry.status == 201, retry
        effect = await the_effect(database_url)
        first, second = (attempt_key(effect["downstream_key"], n) for n in (1, 2))
        assert kit.attempt_keys == [first, second]
        assert kit.rows[first].state is AttemptState.TOMBSTONED
        assert kit.rows[second].state is AttemptState.COMMITTED
        assert len(kit.entries) == 1


# ------------------------------------------------------------------------- no proof


async def _plain_404(_: str) -> web.Response:
    return web.Response(status=404, text="Not Found")


async def _server_error(_: str) -> web.Response:
    return web.Response(status=500, text="oops")


async def _another_key(key: str) -> web.Response:
    other = attempt_key("not-this-effect", 1)
    return web.json_response(
        AttemptReport(other, AttemptState.ABSENT).to_json(), status=404
    )


async def _too_late(_: str) -> web.Response:
    """Answers long after the contract's 400 ms timeout, but soon enough that the test
    server's shutdown (which waits for running handlers) is not held for a minute."""
    await asyncio.sleep(3)
    return web.json_response({"error": "too late"}, status=504)


async def _busy(_: str) -> web.Response:
    return web.json_response({"error": "unavailable"}, status=503)


INCONCLUSIVE_LOOKUPS: dict[str, Override] = {
    "plain 404 without the kit's document": _plain_404,
    "500": _server_error,
    "a document about another attempt key": _another_key,
    "no answer within the timeout": _too_late,
    "503": _busy,
}


@pytest.mark.parametrize("answer", list(INCONCLUSIVE_LOOKUPS))
async def test_a_lookup_without_proof_leaves_it_unknown_and_sends_nothing(
    database_url: str, tmp_path: Path, answer: str
) -> None:
    async with transactional(database_url, tmp_path) as (broker, kit):
        kit.script.append("refuse_503")
        kit.lookup_override = INCONCLUSIVE_LOOKUPS[answer]
        assert (await post(broker)).status == 502

        retry = await post(broker)
        await due_now(broker)
        await reconcile(broker)

        assert_unknown(retry)
        assert "could not say whether attempt 1 committed" in retry.problem["detail"]
        assert len(kit.attempt_keys) == 1, "nothing was sent again"
        assert kit.tombstones == [] and kit.entries == []
        assert len(kit.lookups) == 2  # the client's retry, then the reconciler
        effect = await the_effect(database_url)
        assert (effect["status"], effect["attempts"]) == ("outcome_unknown", 1)
        events = await history(broker, retry.headers["Effect-Id"])
        assert [event["kind"] for event in events].count("lookup_unknown") == 2
        assert (
            metric(broker, "effect_broker_probes_total", route="ledger", result="unknown")
            == 2
        )


async def test_a_lookup_refused_for_a_wrong_secret_proves_nothing(
    database_url: str, tmp_path: Path
) -> None:
    """401: the kit would not say. Absence is never read into a refusal."""
    async with transactional(database_url, tmp_path) as (broker, kit):
        kit.script.append("refuse_503")
        assert (await post(broker)).status == 502
        kit.secret = "rotated-at-the-target-only"

        retry = await post(broker)

        assert_unknown(retry)
        assert len(kit.attempt_keys) == 1 and kit.tombstones == []
        assert (await the_effect(database_url))["status"] == "outcome_unknown"


@pytest.mark.parametrize("answer", [_server_error, _too_late, _plain_404])
async def test_a_tombstone_without_proof_leaves_it_unknown_and_sends_nothing(
    database_url: str, tmp_path: Path, answer: Override
) -> None:
    async with transactional(database_url, tmp_path) as (broker, kit):
        kit.script.append("refuse_503")
        kit.tombstone_override = answer
        assert (await post(broker)).status == 502

        retry = await post(broker)

        assert_unknown(retry)
        assert len(kit.attempt_keys) == 1 and kit.entries == []
        assert kit.tombstones == kit.attempt_keys
        assert (await the_effect(database_url))["status"] == "outcome_unknown"
        assert (
            metric(
                broker, "effect_broker_tombstones_total", route="ledger", result="unknown"
            )
            == 1
        )


# ------------------------------------------------------------------------ the limit


async def test_proven_absences_spend_the_retry_limit_then_the_proxy_gives_up(
    database_url: str, tmp_path: Path
) -> None:
    async with transactional(database_url, tmp_path, retry_limit=2) as (broker, kit):
        kit.script.extend(["refuse_503", "refuse_503"])
        assert (await post(broker)).status == 502
        second = await post(broker)  # attempt 1 tombstoned; attempt 2 refused too
        assert second.status == 502
        assert_unknown(second)

        given_up = await post(broker)  # attempt 2 tombstoned; the limit is spent

        assert given_up.status == 502
        assert given_up.headers["Effect-Status"] == "failed_final"
        assert given_up.headers["Idempotent-Replayed"] == "true"
        assert "no attempt took effect" in given_up.json["error"]
        effect = await the_effect(database_url)
        assert (effect["status"], effect["attempts"], effect["source"]) == (
            "failed_final",
            2,
            "proxy",
        )
        assert kit.entries == []
        assert len(set(kit.attempt_keys)) == 2
        assert kit.tombstones == kit.attempt_keys


async def test_an_operator_cannot_requeue_it_but_can_have_it_looked_up_again(
    database_url: str, tmp_path: Path
) -> None:
    """Only a tombstone proves absence: an operator's word would let the lost attempt
    commit beside the next one, so the admin API offers the lookup instead."""
    async with transactional(database_url, tmp_path) as (broker, kit):
        kit.script.append("refuse_503")
        kit.lookup_override = _server_error
        assert (await post(broker)).status == 502
        effect_id = (await post(broker)).headers["Effect-Id"]
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        requeue = await request(
            "POST",
            f"{broker.admin_url}/v1/effects/{effect_id}/resolve",
            headers={**admin, "Content-Type": "application/json"},
            data=json.dumps({"resolution": "not_committed", "reason": "target says so"}),
        )
        assert requeue.status == 409, requeue
        assert "tombstone" in requeue.problem["detail"]

        kit.lookup_override = None
        again = await request(
            "POST", f"{broker.admin_url}/v1/effects/{effect_id}/reconcile", headers=admin
        )
        assert again.status < 300, again
        await reconcile(broker)

        effect = await the_effect(database_url)
        assert (effect["status"], effect["attempts"]) == ("succeeded", 2)
        assert len(kit.entries) == 1 and kit.tombstones == [kit.attempt_keys[0]]


async def test_a_second_retry_during_the_lookup_is_told_it_is_in_flight(
    database_url: str, tmp_path: Path
) -> None:
    """The lookup holds the effect (RECONCILING, leased): a concurrent retry that will
    not wait neither looks up nor sends, and the first retry's proof is what everyone
    gets."""
    async with transactional(database_url, tmp_path) as (broker, kit):
        kit.script.append("commit_then_500")
        started, gate = asyncio.Event(), asyncio.Event()

        async def gated(key: str) -> web.Response:
            started.set()
            await gate.wait()
            return web.json_response(kit.rows[key].to_json(), status=200)

        kit.lookup_override = gated
        assert (await post(broker)).status == 502
        first = asyncio.create_task(post(broker))
        await started.wait()

        second = await post(broker, prefer="wait=0")
        gate.set()
        settled = await first

        assert second.status == 409, second
        assert second.problem["type"].endswith("in-flight")
        assert settled.status == 201 and settled.json["id"] == "entry-1"
        assert len(kit.lookups) == 1 and len(kit.attempt_keys) == 1
        assert len(kit.entries) == 1
