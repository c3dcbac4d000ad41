"""The demo payment target: its charges table must tell the truth about every mode.

The crash matrix trusts the target's own table as ground truth, so these tests read the
SQLite file directly rather than only asking the HTTP API.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sqlite3
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from pytest_aiohttp import AiohttpClient

from effect_broker.demo import payment_target as target
from tests.support import poll

Client = TestClient[Any, Any]
MakeClient = Callable[..., Awaitable[Client]]

CHARGE = {"amount": 1999, "currency": "usd", "order_id": "order-1"}
IDEMPOTENT = "/idempotent/v1/charges"
RECONCILABLE = "/reconcilable/v1/charges"
UNSAFE = "/unsafe/v1/charges"


def body(**changes: Any) -> bytes:
    return json.dumps({**CHARGE, **changes}).encode()


def keyed(key: str = "k1") -> dict[str, str]:
    return {"Idempotency-Key": key}


def rows(db_path: Path) -> list[sqlite3.Row]:
    """The target's authoritative table, read straight from the file."""
    conn = sqlite3.connect(db_path)
    try:
        conn.row_factory = sqlite3.Row
        return conn.execute("SELECT * FROM charges ORDER BY created_at, id").fetchall()
    finally:
        conn.close()


async def eventually_rows(db_path: Path, expected: int, within: float = 5.0) -> None:
    """Poll the table until it holds ``expected`` rows, failing after ``within`` s."""
    await poll(
        lambda: len(rows(db_path)) == expected,
        within=within,
        every=0.01,
        what=lambda: f"{expected} rows, have {rows(db_path)}",
    )


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "payments.sqlite3"


@pytest.fixture
def make_client(aiohttp_client: AiohttpClient, db_path: Path) -> MakeClient:
    async def make(
        *,
        settlement_delay: float = 0.0,
        key_retention: float = 86400.0,
        hang_after_commit: Sequence[str] = (),
    ) -> Client:
        app: web.Application = target.build_app(
            db_path,
            settlement_delay=settlement_delay,
            key_retention=key_retention,
            hang_after_commit=hang_after_commit,
        )
        return await aiohttp_client(app)

    return make


@pytest.fixture
async def client(make_client: MakeClient) -> Client:
    return await make_client()


# --------------------------------------------------------------------------- idempotent


async def test_idempotent_first_request_charges_once(
    client: Client, db_path: Path
) -> None:
    resp = await client.post(IDEMPOTENT, data=body(), headers=keyed())
    assert resp.status == 201
    assert "Idempotent-Replayed" not in resp.headers
    answer = await resp.json()
    assert re.fullmatch(r"ch_[0-9a-f]{24}", answer["id"])
    assert answer == {**CHARGE, "id": answer["id"], "status": "succeeded"}
    (row,) = rows(db_path)
    assert (row["id"], row["mode"], row["idempotency_key"]) == (
        answer["id"],
        "idempotent",
        "k1",
    )
    assert (row["amount"], row["currency"], row["order_id"]) == (1999, "usd", "order-1")
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        conn.close()


async def test_idempotent_replay_is_byte_identical_and_writes_nothing(
    client: Client, db_path: Path
) -> None:
    first = await client.post(IDEMPOTENT, data=body(), headers=keyed())
    again = await client.post(IDEMPOTENT, data=body(), headers=keyed())
    assert (first.status, again.status) == (201, 201)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert await again.read() == await first.read()
    assert len(rows(db_path)) == 1


async def test_idempotent_payload_drift_is_refused(client: Client, db_path: Path) -> None:
    await client.post(IDEMPOTENT, data=body(), headers=keyed())
    resp = await client.post(IDEMPOTENT, data=body(amount=2000), headers=keyed())
    assert resp.status == 422
    assert "error" in await resp.json()
    assert len(rows(db_path)) == 1


async def test_idempotent_without_key_is_refused(client: Client, db_path: Path) -> None:
    resp = await client.post(IDEMPOTENT, data=body())
    assert resp.status == 400
    assert "Idempotency-Key" in (await resp.json())["error"]
    assert rows(db_path) == []


async def test_idempotent_key_past_retention_charges_again(
    make_client: MakeClient, db_path: Path
) -> None:
    """Retention 0 forgets every key at once: the retention risk, made visible."""
    client = await make_client(key_retention=0.0)
    for _ in range(2):
        resp = await client.post(IDEMPOTENT, data=body(), headers=keyed())
        assert resp.status == 201
        assert "Idempotent-Replayed" not in resp.headers
    charges = rows(db_path)
    assert [row["idempotency_key"] for row in charges] == ["k1", "k1"]
    assert charges[0]["id"] != charges[1]["id"]


async def test_concurrent_identical_requests_charge_exactly_once(
    client: Client, db_path: Path
) -> None:
    async def attempt() -> tuple[int, bool, bytes]:
        resp = await client.post(IDEMPOTENT, data=body(), headers=keyed("k"))
        return resp.status, "Idempotent-Replayed" in resp.headers, await resp.read()

    results = await asyncio.gather(*(attempt() for _ in range(20)))
    assert {status for status, _, _ in results} == {201}
    assert len({answer for _, _, answer in results}) == 1
    assert sum(not replayed for _, replayed, _ in results) == 1
    assert len(rows(db_path)) == 1


class BlindToKeys:
    """A connection that cannot see stored keys: a writer that raced past the look-up."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, args: Sequence[Any] = ()) -> sqlite3.Cursor:
        if sql.startswith("SELECT * FROM idempotency_keys"):
            return self.conn.execute("SELECT * FROM idempotency_keys WHERE 0")
        return self.conn.execute(sql, args)


def test_losing_the_key_race_rolls_back_and_replays_the_winner(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If two writers ever passed the look-up together, the key's primary key decides."""
    store = target.ChargeStore(db_path)
    store.initialize()
    charge = target.parse_charge(body())
    winner = store.charge_once("k1", charge, key_retention=60.0)
    decide = target.ChargeStore._charge_once
    passes: list[str] = []

    def racing(self: Any, conn: sqlite3.Connection, *args: Any) -> Any:
        passes.append("blind" if not passes else "sighted")
        return decide(self, BlindToKeys(conn) if len(passes) == 1 else conn, *args)

    monkeypatch.setattr(target.ChargeStore, "_charge_once", racing)
    loser = store.charge_once("k1", charge, key_retention=60.0)
    assert passes == ["blind", "sighted"]
    assert isinstance(loser, target.Replayed)
    assert (loser.charge_id, loser.body) == (winner.charge_id, winner.body)
    assert [row["id"] for row in rows(db_path)] == [winner.charge_id]


# --------------------------------------------------------------------------- reconcilable


async def test_reconcilable_always_inserts_and_records_correlation(
    client: Client, db_path: Path
) -> None:
    ids = []
    for _ in range(2):
        resp = await client.post(
            RECONCILABLE, data=body(), headers={"X-Correlation-Id": "corr-1"}
        )
        assert resp.status == 201
        answer = await resp.json()
        assert answer["correlation_id"] == "corr-1"
        ids.append(answer["id"])
    charges = rows(db_path)
    assert [row["id"] for row in charges] == ids
    assert {(row["mode"], row["correlation_id"]) for row in charges} == {
        ("reconcilable", "corr-1")
    }


async def test_reconcilable_without_correlation_is_refused(
    client: Client, db_path: Path
) -> None:
    resp = await client.post(RECONCILABLE, data=body())
    assert resp.status == 400
    assert "X-Correlation-Id" in (await resp.json())["error"]
    assert rows(db_path) == []


async def test_lookup_before_settlement_says_not_found(
    make_client: MakeClient, db_path: Path
) -> None:
    client = await make_client(settlement_delay=3600.0)
    await client.post(RECONCILABLE, data=body(), headers={"X-Correlation-Id": "corr-1"})
    assert len(rows(db_path)) == 1
    resp = await client.get(RECONCILABLE, params={"correlation_id": "corr-1"})
    assert resp.status == 404
    assert await resp.json() == {"error": "not found"}


async def test_lookup_after_settlement_finds_the_charge(client: Client) -> None:
    created = await client.post(
        RECONCILABLE, data=body(), headers={"X-Correlation-Id": "corr-1"}
    )
    charge = await created.json()
    resp = await client.get(RECONCILABLE, params={"correlation_id": "corr-1"})
    assert resp.status == 200
    assert await resp.json() == charge


async def test_lookup_of_unknown_or_missing_correlation(client: Client) -> None:
    unknown = await client.get(RECONCILABLE, params={"correlation_id": "never-sent"})
    assert unknown.status == 404
    assert await unknown.json() == {"error": "not found"}
    missing = await client.get(RECONCILABLE)
    assert missing.status == 400


# --------------------------------------------------------------------------- unsafe


async def test_unsafe_always_inserts(client: Client, db_path: Path) -> None:
    for _ in range(2):
        resp = await client.post(UNSAFE, data=body())
        assert resp.status == 201
        assert (await resp.json())["status"] == "succeeded"
    charges = rows(db_path)
    assert len(charges) == 2
    assert {row["mode"] for row in charges} == {"unsafe"}


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[1999]",
        b'{"amount": 1999, "currency": "usd"',
        json.dumps({"currency": "usd", "order_id": "o"}).encode(),
        body(amount=0),
        body(amount=-5),
        body(amount="1999"),
        body(amount=True),
        body(amount=19.99),
        body(currency="US Dollars"),
        body(order_id=""),
        body(order_id=7),
    ],
)
@pytest.mark.parametrize("path", [IDEMPOTENT, RECONCILABLE, UNSAFE])
async def test_invalid_bodies_are_refused_without_a_row(
    client: Client, db_path: Path, path: str, raw: bytes
) -> None:
    headers = {"Idempotency-Key": "k1", "X-Correlation-Id": "corr-1"}
    resp = await client.post(path, data=raw, headers=headers)
    assert resp.status == 400
    assert (await resp.json())["error"].startswith("invalid charge")
    assert rows(db_path) == []


# --------------------------------------------------------------------------- faults


async def test_hang_after_commit_commits_then_never_answers(
    client: Client, db_path: Path
) -> None:
    armed = await client.post("/_faults", json={"hang_after_commit": 1})
    assert await armed.json() == {
        "hang_after_commit": 1,
        "fail_before_commit": 0,
        "stream_after_commit": 0,
    }
    with pytest.raises(TimeoutError):
        await client.post(
            IDEMPOTENT,
            data=body(),
            headers=keyed(),
            timeout=aiohttp.ClientTimeout(total=0.5),
        )
    await eventually_rows(db_path, 1)  # the client gave up, yet the charge happened
    # The fault is used up: the retry gets the stored answer for the committed charge.
    retry = await client.post(IDEMPOTENT, data=body(), headers=keyed())
    assert retry.status == 201
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert (await retry.json())["id"] == rows(db_path)[0]["id"]


async def test_hang_prefix_from_the_command_line(
    make_client: MakeClient, db_path: Path
) -> None:
    client = await make_client(hang_after_commit=["/unsafe/"])
    resp = await client.post(RECONCILABLE, data=body(), headers={"X-Correlation-Id": "c"})
    assert resp.status == 201
    with pytest.raises(TimeoutError):
        await client.post(UNSAFE, data=body(), timeout=aiohttp.ClientTimeout(total=0.5))
    await eventually_rows(db_path, 2)


async def test_fail_before_commit_answers_503_and_writes_nothing(
    client: Client, db_path: Path
) -> None:
    await client.post("/_faults", json={"fail_before_commit": 2})
    for path in (UNSAFE, IDEMPOTENT):
        resp = await client.post(path, data=body(), headers=keyed())
        assert resp.status == 503
        assert await resp.json() == {"error": "unavailable"}
    assert rows(db_path) == []
    resp = await client.post(IDEMPOTENT, data=body(), headers=keyed())
    assert resp.status == 201
    assert "Idempotent-Replayed" not in resp.headers
    assert len(rows(db_path)) == 1


async def test_faults_can_be_read_and_cleared(client: Client, db_path: Path) -> None:
    await client.post("/_faults", json={"hang_after_commit": 3, "fail_before_commit": 2})
    shown = await client.get("/_faults")
    assert await shown.json() == {
        "hang_after_commit": 3,
        "fail_before_commit": 2,
        "stream_after_commit": 0,
    }
    cleared = await client.delete("/_faults")
    assert await cleared.json() == {
        "hang_after_commit": 0,
        "fail_before_commit": 0,
        "stream_after_commit": 0,
    }
    resp = await client.post(UNSAFE, data=body())
    assert resp.status == 201
    assert len(rows(db_path)) == 1


async def test_a_streamed_answer_commits_and_stops_halfway(
    client: Client, db_path: Path
) -> None:
    """``stream_after_commit``: the charge commits, its answer goes out chunked (no
    Content-Length) and stops after half of its body."""
    await client.post("/_faults", json={"stream_after_commit": 1})
    async with client.post(UNSAFE, data=body()) as resp:
        assert resp.status == 201
        assert resp.headers["Transfer-Encoding"] == "chunked"
        assert "Content-Length" not in resp.headers
        first = await resp.content.readany()
        assert len(rows(db_path)) == 1  # committed before the first byte
        assert first.startswith(b"{")
        with pytest.raises(ValueError):
            json.loads(first)  # half a document, and nothing more will come
    assert (await (await client.get("/_faults")).json())["stream_after_commit"] == 0


@pytest.mark.parametrize(
    "raw",
    [b"nope", b"[]", b"{}", b'{"explode": 1}', b'{"hang_after_commit": -1}'],
)
async def test_bad_fault_requests_are_refused(client: Client, raw: bytes) -> None:
    resp = await client.post("/_faults", data=raw)
    assert resp.status == 400
    assert await (await client.get("/_faults")).json() == {
        "hang_after_commit": 0,
        "fail_before_commit": 0,
        "stream_after_commit": 0,
    }


# --------------------------------------------------------------------------- inspection


async def test_listing_counting_and_health(client: Client) -> None:
    await client.post(IDEMPOTENT, data=body(), headers=keyed())
    await client.post(RECONCILABLE, data=body(), headers={"X-Correlation-Id": "c1"})
    await client.post(UNSAFE, data=body(order_id="order-2"))

    listed = await (await client.get("/charges")).json()
    assert [(c["mode"], c["idempotency_key"], c["correlation_id"]) for c in listed] == [
        ("idempotent", "k1", None),
        ("reconcilable", None, "c1"),
        ("unsafe", None, None),
    ]
    assert set(listed[0]) == {
        "id",
        "mode",
        "idempotency_key",
        "correlation_id",
        "order_id",
        "amount",
    }
    count = await client.get("/charges/count", params={"order_id": "order-1"})
    assert await count.json() == {"count": 2}
    assert await (await client.get("/charges/count")).json() == {"count": 3}
    assert (await client.get("/healthz")).status == 200


# --------------------------------------------------------------------------- process


async def _start_target(db_path: Path) -> tuple[asyncio.subprocess.Process, str]:
    """Run the example as ``effect-broker up`` does; wait for its listening line."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        target.MODULE,
        "--port",
        "0",
        "--db",
        str(db_path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), timeout=20.0)
    match = re.fullmatch(
        rb"payment target listening on (http://127\.0\.0\.1:\d+) \(db (.+)\)\n", line
    )
    assert match, line
    assert match[2].decode() == str(db_path)
    return proc, match[1].decode()


async def _stop(proc: asyncio.subprocess.Process, signum: int) -> bytes:
    """Signal the target and collect its stderr; it must be gone within seconds."""
    proc.send_signal(signum)
    _, stderr = await asyncio.wait_for(proc.communicate(), timeout=5.0)
    return stderr


async def test_runs_as_a_process_and_stops_cleanly_on_sigterm(db_path: Path) -> None:
    proc, url = await _start_target(db_path)
    try:
        async with aiohttp.ClientSession() as session:
            resp = await session.post(url + IDEMPOTENT, data=body(), headers=keyed())
            assert resp.status == 201
        stderr = await _stop(proc, signal.SIGTERM)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0
    assert b"POST /idempotent/v1/charges key=k1 -> 201 created ch_" in stderr
    assert len(rows(db_path)) == 1


async def test_process_stops_promptly_while_an_answer_is_withheld(db_path: Path) -> None:
    proc, url = await _start_target(db_path)
    try:
        async with aiohttp.ClientSession() as session:
            await session.post(url + "/_faults", json={"hang_after_commit": 1})
            pending = asyncio.create_task(session.post(url + UNSAFE, data=body()))
            await eventually_rows(db_path, 1)
            await _stop(proc, signal.SIGINT)
            with pytest.raises(aiohttp.ServerDisconnectedError):
                await pending  # the charge committed, the answer never came
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0
    assert len(rows(db_path)) == 1
