"""The demo payment target's transactional mode: charges in PostgreSQL written with the
target kit, over real HTTP, with the fault holds that stage the tombstone races.

Ground truth is the target's own ``charges`` table in PostgreSQL, counted directly.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from pytest_aiohttp import AiohttpClient

from effect_broker.demo import payment_target as target
from effect_broker.target import AttemptReport, AttemptState
from effect_broker.target.protocol import (
    ATTEMPT_KEY_HEADER,
    SECRET_HEADER,
    attempt_key,
    lookup_path,
    tombstone_path,
)
from tests.integration.target_support import lock_waiters
from tests.support import poll

Client = TestClient[Any, Any]
SECRET = "demo-kit-secret"
AUTH = {SECRET_HEADER: SECRET}
PATH = "/transactional/v1/charges"
CHARGE = {"amount": 4200, "currency": "usd", "order_id": "order-42"}
FIRST = attempt_key("derived-key-of-order-42", 1)
SECOND = attempt_key("derived-key-of-order-42", 2)
PROBLEMS = "https://effect-broker.dev/problems/"


async def charges(url: str) -> int:
    """The target's ground truth, straight from its table."""
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM charges"))
    finally:
        await conn.close()


@pytest.fixture
def make_client(
    aiohttp_client: AiohttpClient, empty_database_url: str, tmp_path: Path
) -> Callable[..., Awaitable[Client]]:
    async def make(tombstone_wait: float = 30.0) -> Client:
        app: web.Application = target.build_app(
            tmp_path / "other-modes.sqlite3",
            settlement_delay=0.0,
            key_retention=3600.0,
            database_url=empty_database_url,
            kit_secret=SECRET,
            tombstone_wait=tombstone_wait,
        )
        return await aiohttp_client(app)

    return make


@pytest.fixture
async def client(make_client: Callable[..., Awaitable[Client]]) -> Client:
    return await make_client()


async def charge(client: Client, key: str, **options: Any) -> aiohttp.ClientResponse:
    return await client.post(
        PATH, json=CHARGE, headers={ATTEMPT_KEY_HEADER: key}, **options
    )


async def lookup(client: Client, key: str) -> AttemptReport:
    answer = await client.get(lookup_path(key), headers=AUTH)
    return AttemptReport.from_json(await answer.json(), expected_key=key)


async def tombstone(client: Client, key: str) -> tuple[int, AttemptReport | None]:
    answer = await client.put(tombstone_path(key), headers=AUTH)
    document = await answer.json()
    if document.get("protocol") is None:
        return answer.status, None
    return answer.status, AttemptReport.from_json(document, expected_key=key)


async def held(client: Client, count: int) -> None:
    """Until ``count`` charges are held inside their transactions."""

    async def look() -> bool | None:
        shown = await (await client.get("/_faults")).json()
        return True if shown["held"] == count else None

    await poll(look)


async def arm(client: Client, **faults: int) -> None:
    answer = await client.post("/_faults", json=faults)
    assert answer.status == 200, await answer.text()


async def test_a_charge_commits_with_its_receipt_and_is_replayed(
    client: Client, empty_database_url: str
) -> None:
    first = await charge(client, FIRST)
    again = await charge(client, FIRST)

    assert first.status == 201
    body = await first.read()
    assert json.loads(body)["order_id"] == "order-42"
    assert again.status == 201
    assert await again.read() == body
    assert await charges(empty_database_url) == 1
    found = await lookup(client, FIRST)
    assert found.state is AttemptState.COMMITTED
    assert found.answer is not None and found.answer.body == body
    listed = await (await client.get("/charges")).json()
    assert [(c["mode"], c["attempt_key"]) for c in listed] == [("transactional", FIRST)]
    assert await (await client.get("/charges/count")).json() == {"count": 1}


async def test_the_tombstone_wins_against_a_transaction_held_open(
    client: Client, empty_database_url: str
) -> None:
    """The charge is INSERTed, its transaction held open before the receipt: the
    proxy's tombstone commits at once, and on release the attempt loses and rolls back.
    The next attempt key then charges exactly once."""
    await arm(client, hold_before_receipt=1)
    attempt = asyncio.create_task(charge(client, FIRST))
    await held(client, 1)

    status, report = await tombstone(client, FIRST)
    assert status == 201
    assert report is not None and report.state is AttemptState.TOMBSTONED

    released = await (await client.post("/_faults/release")).json()
    lost = await attempt
    assert released == {"released": 1}
    assert lost.status == 409
    assert (await lost.json())["type"] == PROBLEMS + "attempt-tombstoned"
    assert await charges(empty_database_url) == 0
    assert (await lookup(client, FIRST)).state is AttemptState.TOMBSTONED

    late = await charge(client, FIRST)  # a late duplicate of the given-up attempt
    assert late.status == 409
    assert (await charge(client, SECOND)).status == 201
    assert await charges(empty_database_url) == 1


async def test_a_tombstone_waits_for_a_receipt_about_to_commit_and_is_refused(
    client: Client, empty_database_url: str
) -> None:
    await arm(client, hold_before_commit=1)
    attempt = asyncio.create_task(charge(client, FIRST))
    await held(client, 1)
    racing = asyncio.create_task(tombstone(client, FIRST))
    await poll(lambda: lock_waiters(empty_database_url))
    assert not racing.done()

    await client.post("/_faults/release")
    committed = await attempt
    status, report = await racing

    assert committed.status == 201
    assert status == 409
    assert report is not None and report.state is AttemptState.COMMITTED
    assert report.answer is not None and report.answer.body == await committed.read()
    assert await charges(empty_database_url) == 1


async def test_a_tombstone_waits_only_its_bound_then_asks_to_be_asked_again(
    make_client: Callable[..., Awaitable[Client]], empty_database_url: str
) -> None:
    client = await make_client(tombstone_wait=0.2)
    await arm(client, hold_before_commit=1)
    attempt = asyncio.create_task(charge(client, FIRST))
    await held(client, 1)

    status, report = await tombstone(client, FIRST)
    await client.post("/_faults/release")

    assert (status, report) == (503, None)
    assert (await attempt).status == 201
    assert (await tombstone(client, FIRST))[0] == 409
    assert await charges(empty_database_url) == 1


async def test_a_committed_charge_whose_answer_is_lost_is_found_by_lookup(
    client: Client, empty_database_url: str
) -> None:
    await arm(client, hang_after_commit=1)
    with pytest.raises(TimeoutError):
        await charge(client, FIRST, timeout=aiohttp.ClientTimeout(total=0.5))

    assert await poll(lambda: _committed(client, FIRST))
    status, _ = await tombstone(client, FIRST)
    assert status == 409
    assert await charges(empty_database_url) == 1


async def test_fail_before_commit_writes_nothing_and_proves_nothing(
    client: Client, empty_database_url: str
) -> None:
    await arm(client, fail_before_commit=1)
    failed = await charge(client, FIRST)
    assert failed.status == 503
    assert (await lookup(client, FIRST)).state is AttemptState.ABSENT
    assert await charges(empty_database_url) == 0


@pytest.mark.parametrize("headers", [{}, {ATTEMPT_KEY_HEADER: "not an attempt key"}])
async def test_a_charge_without_a_good_attempt_key_is_refused(
    client: Client, empty_database_url: str, headers: dict[str, str]
) -> None:
    answer = await client.post(PATH, json=CHARGE, headers=headers)
    assert answer.status == 400
    assert ATTEMPT_KEY_HEADER in (await answer.json())["error"]
    assert await charges(empty_database_url) == 0


async def test_the_kit_endpoints_need_the_secret(client: Client) -> None:
    await charge(client, FIRST)
    refused = await client.put(tombstone_path(FIRST), headers={SECRET_HEADER: "nope"})
    assert refused.status == 401
    assert (await lookup(client, FIRST)).state is AttemptState.COMMITTED


async def test_holds_exist_only_in_transactional_mode(
    aiohttp_client: AiohttpClient, tmp_path: Path
) -> None:
    app = target.build_app(tmp_path / "t.sqlite3", settlement_delay=0, key_retention=1)
    client = await aiohttp_client(app)
    refused = await client.post("/_faults", json={"hold_before_receipt": 1})
    assert refused.status == 400
    assert await (await client.get("/_faults")).json() == {
        "hang_after_commit": 0,
        "fail_before_commit": 0,
        "stream_after_commit": 0,
    }
    assert (await client.post(PATH, json=CHARGE)).status == 404


async def test_runs_as_a_process_with_the_secret_from_the_environment(
    empty_database_url: str, tmp_path: Path
) -> None:
    async with (
        TargetProcess(empty_database_url, tmp_path, SECRET) as url,
        aiohttp.ClientSession() as session,
    ):
        posted = await session.post(
            url + PATH, json=CHARGE, headers={ATTEMPT_KEY_HEADER: FIRST}
        )
        found = await session.get(url + lookup_path(FIRST), headers=AUTH)
        assert posted.status == 201
        assert found.status == 200
    assert await charges(empty_database_url) == 1


async def test_refuses_transactional_mode_without_a_secret(
    empty_database_url: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PAYMENT_TARGET_KIT_SECRET"}
    proc = await asyncio.create_subprocess_exec(
        *_argv(empty_database_url, tmp_path),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(proc.communicate(), timeout=20.0)
    assert proc.returncode == 2
    assert b"PAYMENT_TARGET_KIT_SECRET" in stderr


async def _committed(client: Client, key: str) -> bool | None:
    return True if (await lookup(client, key)).state is AttemptState.COMMITTED else None


def _argv(database_url: str, tmp_path: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        target.MODULE,
        "--port",
        "0",
        "--db",
        str(tmp_path / "other-modes.sqlite3"),
        "--database-url",
        database_url,
    ]


class TargetProcess:
    """The target as ``python -m``, stopped with SIGTERM on the way out."""

    def __init__(self, database_url: str, tmp_path: Path, secret: str) -> None:
        self.argv = _argv(database_url, tmp_path)
        self.env = {**os.environ, "PAYMENT_TARGET_KIT_SECRET": secret}

    async def __aenter__(self) -> str:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, env=self.env, stdout=asyncio.subprocess.PIPE
        )
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), timeout=20.0)
        match = re.match(rb"payment target listening on (http://\S+)", line)
        assert match, line
        return match[1].decode()

    async def __aexit__(self, *exc: object) -> None:
        self.proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(self.proc.wait(), timeout=10.0)
        assert self.proc.returncode == 0
