"""The writes after a reservation commit on one worker: no two-phase commit.

A write whose statement inserts from its own UPDATE's rows runs on Citus as several
steps whose intermediate rows go to every worker, so each worker takes part in its
commit: Citus prepares the transaction on each of them and records it in
``pg_dist_transaction``. On a sharded ledger the store calls each write's function
instead (``<write>_call``, migration 0014), distributed by tenant: the coordinator
hands the call to the tenant's worker, which runs and commits it alone.

Each call runs here on a connection of its own that has Citus report every command it
sends to a worker (``citus.log_remote_commands``): a two-phase commit shows as
``PREPARE TRANSACTION`` among them, and as rows of ``pg_dist_transaction`` whose
transaction id names this connection's backend.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import pytest

from effect_broker.models import EffectStatus
from effect_broker.store import Store
from effect_broker.store.sql import queries
from tests.citus_support import SKIP_REASON, citus_url
from tests.integration.ledger import LEASE, reserve

if citus_url() is None:
    pytest.skip(SKIP_REASON, allow_module_level=True)

TENANT = "tenant-3"


class Watched:
    """A coordinator connection that records the commands Citus sends to workers."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self.remote: list[str] = []
        conn.add_log_listener(lambda _conn, message: self.remote.append(message.message))

    async def run(
        self, block: str, *args: Any
    ) -> tuple[asyncpg.Record | None, list[str]]:
        """One block's row, and the commands sent to workers while it ran."""
        start = len(self.remote)
        row = await self.conn.fetchrow(queries()[block], *args)
        return row, self.remote[start:]

    async def rows(
        self, block: str, *args: Any
    ) -> tuple[list[asyncpg.Record], list[str]]:
        """A block's rows, and the commands sent to workers while it ran."""
        start = len(self.remote)
        rows = await self.conn.fetch(queries()[block], *args)
        return rows, self.remote[start:]

    async def prepared_here(self) -> int:
        """Rows of pg_dist_transaction for two-phase commits this backend started."""
        return int(
            await self.conn.fetchval(
                "SELECT count(*) FROM pg_dist_transaction"
                " WHERE gid LIKE 'citus\\_%\\_' || pg_backend_pid() || '\\_%'"
            )
        )


@pytest.fixture
async def watched(database_url: str) -> AsyncIterator[tuple[Store, Watched]]:
    conn = await asyncpg.connect(database_url)
    await conn.execute("SET citus.log_remote_commands = on")
    await conn.execute("SET client_min_messages = log")
    store = await Store.connect(database_url)
    try:
        yield store, Watched(conn)
    finally:
        await store.close()
        await conn.close()


def _two_phase(remote: list[str]) -> list[str]:
    return [command for command in remote if "PREPARE TRANSACTION" in command]


async def test_the_store_calls_the_functions_on_a_sharded_ledger(
    watched: tuple[Store, Watched],
) -> None:
    store, _ = watched
    for write in ("start_attempt", "record_receipt", "transition", "reschedule"):
        assert await store._write_sql(write) == queries()[f"{write}_call"]
    assert await store._write_sql("renew_lease") == queries()["renew_lease_call"]


async def test_each_converted_write_commits_on_one_worker_its_chain_intact(
    watched: tuple[Store, Watched],
) -> None:
    store, watcher = watched
    effect = (await reserve(store, tenant_id=TENANT)).effect
    effect_id: UUID = effect.effect_id
    version = effect.version
    steps: list[tuple[str, list[Any]]] = [
        ("start_attempt_call", [effect_id, version, "p", LEASE, None, None, "prepared"]),
        ("renew_lease_call", [effect_id, version + 1, "p", LEASE]),
        (
            "transition_call",
            [
                *(effect_id, version + 2, "dispatching", "outcome_unknown", "timeout"),
                *("p", None, None, timedelta(0), "timed out", "{}", None),
            ],
        ),
        (
            "reschedule_call",
            [effect_id, version + 3, "outcome_unknown", timedelta(seconds=5), "r", None],
        ),
        (
            "record_receipt_call",
            [
                *(effect_id, version + 4, "outcome_unknown", "succeeded", "settled"),
                *("r", 200, b"sealed", "probe", None, '{"a": 1}'),
            ],
        ),
    ]
    for n, (block, args) in enumerate(steps, start=1):
        row, remote = await watcher.run(block, *args, TENANT)
        assert row is not None, block
        assert row["version"] == version + n, block
        assert row["event_written"], block
        assert any(block.removesuffix("_call") + "_effect(" in c for c in remote), remote
        assert _two_phase(remote) == [], (block, remote)
    assert await watcher.prepared_here() == 0

    settled = await store.get(TENANT, effect_id)
    assert settled.status is EffectStatus.SUCCEEDED
    assert settled.version == version + len(steps)
    assert await store.verify_events(TENANT, effect_id) is None
    kinds = [event.kind for event in await store.events(TENANT, effect_id)]
    assert kinds == [
        "reserved",
        "dispatch",
        "lease_renewed",
        "timeout",
        "rescheduled",
        "settled",
    ]
    receipt = await store.receipt(TENANT, effect_id)
    assert receipt is not None and receipt.status_code == 200


async def test_a_fenced_call_changes_nothing_and_commits_on_one_worker(
    watched: tuple[Store, Watched],
) -> None:
    store, watcher = watched
    effect = (await reserve(store, tenant_id=TENANT)).effect
    args = [effect.effect_id, effect.version + 1, "p", LEASE, None, None, "prepared"]
    row, remote = await watcher.run("start_attempt_call", *args, TENANT)
    assert row is None
    assert _two_phase(remote) == []
    assert await store.get(TENANT, effect.effect_id) == effect


async def test_the_statement_it_replaces_commits_on_every_worker(
    watched: tuple[Store, Watched],
) -> None:
    """The control: the same write as one PostgreSQL's statement prepares its commit
    on the workers, which is what the test above would see if a call did."""
    store, watcher = watched
    effect = (await reserve(store, tenant_id=TENANT)).effect
    started = await store.start_attempt(effect, owner="p", lease=LEASE)
    args = [started.effect_id, started.version, "p", LEASE, TENANT]
    row, remote = await watcher.run("renew_lease", *args)
    assert row is not None
    assert _two_phase(remote) != []
    assert await store.verify_events(TENANT, started.effect_id) is None


async def test_a_tenants_batch_commits_on_one_worker_its_chains_intact(
    watched: tuple[Store, Watched],
) -> None:
    """Group commit's share of one tenant: start three effects and settle them, a
    fourth request fenced, each batch one call on the tenant's worker."""
    store, watcher = watched
    effects = [
        (await reserve(store, tenant_id=TENANT, operation_key=f"k{n}")).effect
        for n in range(3)
    ]
    fenced = effects[0].version + 1
    starts = [
        [e.effect_id for e in effects] + [effects[0].effect_id],
        [e.version for e in effects] + [fenced],
        ["p"] * 4,
        [LEASE] * 4,
        [None] * 4,
        [None] * 4,
        ["prepared"] * 4,
        [TENANT] * 4,
    ]
    rows, remote = await watcher.rows("start_attempt_batch_of_tenant", *starts, TENANT)
    assert [row["batch_ord"] for row in rows] == [1, 2, 3]
    assert any("start_attempts_of_tenant(" in command for command in remote), remote
    assert _two_phase(remote) == []

    settles = [
        [e.effect_id for e in effects],
        [row["version"] for row in rows],
        ["dispatching"] * 3,
        ["succeeded"] * 3,
        ["settled"] * 3,
        ["p"] * 3,
        [201] * 3,
        [b"sealed"] * 3,
        ["response"] * 3,
        [None] * 3,
        ["{}"] * 3,
        [TENANT] * 3,
    ]
    rows, remote = await watcher.rows("record_receipt_batch_of_tenant", *settles, TENANT)
    assert [row["batch_ord"] for row in rows] == [1, 2, 3]
    assert any("record_receipts_of_tenant(" in command for command in remote), remote
    assert _two_phase(remote) == []
    assert await watcher.prepared_here() == 0
    for effect in effects:
        settled = await store.get(TENANT, effect.effect_id)
        assert settled.status is EffectStatus.SUCCEEDED
        assert await store.verify_events(TENANT, effect.effect_id) is None
        kinds = [event.kind for event in await store.events(TENANT, effect.effect_id)]
        assert kinds == ["reserved", "dispatch", "settled"]


async def test_a_tenants_claim_commits_on_one_worker_its_chain_intact(
    watched: tuple[Store, Watched],
) -> None:
    store, watcher = watched
    effect = (await reserve(store, tenant_id=TENANT)).effect
    effect = await store.start_attempt(effect, owner="p", lease=LEASE)
    effect = await store.transition(
        effect,
        EffectStatus.OUTCOME_UNKNOWN,
        kind="timeout",
        actor="p",
        due_in=timedelta(0),
    )
    rows, remote = await watcher.rows("claim_due_of_tenant", 10, "r", LEASE, TENANT)
    assert [(row["effect_id"], row["previous_owner"]) for row in rows] == [
        (effect.effect_id, None)
    ]
    assert rows[0]["version"] == effect.version + 1
    assert any("claim_due_effects_of_tenant(" in command for command in remote), remote
    assert _two_phase(remote) == []
    assert await watcher.prepared_here() == 0
    assert await store.verify_events(TENANT, effect.effect_id) is None
    kinds = [event.kind for event in await store.events(TENANT, effect.effect_id)]
    assert kinds == ["reserved", "dispatch", "timeout", "claimed"]


async def test_a_tenants_reservations_commit_on_one_worker(
    watched: tuple[Store, Watched],
) -> None:
    """Group commit's share of reservations: two new keys (one started at once) and
    one taken already, one call on the tenant's worker."""
    store, watcher = watched
    taken = (await reserve(store, tenant_id=TENANT, operation_key="taken")).effect
    keys = ["new-a", "new-b", "taken"]
    columns = [
        [uuid4() for _ in keys],
        [TENANT] * 3,
        keys,
        [taken.request_hash] * 3,
        [taken.route] * 3,
        [taken.contract_name] * 3,
        [taken.contract_version] * 3,
        [taken.safety.value] * 3,
        [taken.downstream_key] * 3,
        [None] * 3,
        ["{}"] * 3,
        ["p"] * 3,
        [LEASE] * 3,
        [True, False, False],
        [timedelta(hours=1)] * 3,
        [None] * 3,
    ]
    rows, remote = await watcher.rows("reserve_batch_of_tenant", *columns, TENANT)
    by_ord = {row["ord"]: row for row in rows}
    assert sorted(by_ord) == [1, 2, 3]
    assert [by_ord[n]["created"] for n in (1, 2, 3)] == [True, True, False]
    assert by_ord[1]["status"] == "dispatching"
    assert by_ord[3]["effect_id"] == taken.effect_id
    assert any("reserve_effects_of_tenant(" in command for command in remote), remote
    assert _two_phase(remote) == []
    assert await watcher.prepared_here() == 0
    for n in (1, 2):
        effect_id = by_ord[n]["effect_id"]
        assert await store.verify_events(TENANT, effect_id) is None
    started = await store.events(TENANT, by_ord[1]["effect_id"])
    assert [event.kind for event in started] == ["reserved", "dispatch"]
