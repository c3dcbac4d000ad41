"""Every runtime statement stays on its index on a ledger PostgreSQL never analyzed.

A brand-new ledger on a server with autovacuum off is never analyzed, and a plan that
reads a whole table gets slower with every effect written (throughput halved within
half a minute at c=64 before this test existed). Each named block of ``queries.sql``
runs here, with representative parameters and rolled back, against a ledger of a
realistic size; the test counts the sequential scans of the watched tables in
``pg_stat_xact_user_tables``, which covers the statements run inside plpgsql functions,
triggers and foreign-key checks too, under both a custom and a generic plan (asyncpg
prepares every statement, and a cached generic plan is what a pool keeps using).
EXPLAIN of each top-level statement adds the branches one run does not reach. The
periodic blocks (``BOUNDS``) must also read no more rows than they are asked for: a
walk of a whole index is no sequential scan, but it reads the whole ledger all the same.

A block that reads a whole table on purpose is listed in ``SCANNING`` with why; a
block in neither list fails the test, so a new query must be classified to land.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from effect_broker.store import Store
from effect_broker.store.sql import queries
from tests.integration.index_use_support import (
    AUTOVACUUM_OFF,
    KEY_ID,
    TENANTS,
    WATCHED_TABLES,
    effect_row,
    fill_ledger,
    never_analyzed,
    new_id,
)

PLAN_MODES = ("force_custom_plan", "force_generic_plan")
LEASE = timedelta(seconds=30)
DAY = timedelta(days=1)
HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class Samples:
    """Stored effects of tenant 0 the parameters point at, one per status needed."""

    prepared: Mapping[str, Any]
    dispatching: Mapping[str, Any]
    retryable: Mapping[str, Any]
    succeeded: Mapping[str, Any]
    receipt: Mapping[str, Any]


def _sealed(key_id: str, body: bytes = b"0123456789abcdef") -> bytes:
    return bytes([1, len(key_id)]) + key_id.encode() + body


def _reserve(s: Samples, key: str, dispatch: bool) -> list[Any]:
    return [
        new_id(),
        "tenant-0",
        key,
        "hash-new",
        "route-0",
        "contract-0",
        "1",
        "idempotent",
        "downstream",
        _sealed(KEY_ID),
        "{}",
        "worker-b",
        LEASE,
        dispatch,
        DAY,
        HOUR,
    ]


def _reserve_batch(s: Samples) -> list[Any]:
    rows = [_reserve(s, "op-new", True), _reserve(s, s.succeeded["operation_key"], True)]
    return [list(column) for column in zip(*rows, strict=True)]


def _start(effect: Mapping[str, Any]) -> list[Any]:
    return [
        effect["effect_id"],
        effect["version"],
        "worker-b",
        LEASE,
        DAY,
        HOUR,
        effect["status"],
        effect["tenant_id"],
    ]


def _receipt(effect: Mapping[str, Any], details: str = "{}") -> list[Any]:
    return [
        effect["effect_id"],
        effect["version"],
        effect["status"],
        "succeeded",
        "settled",
        "worker-a",
        200,
        _sealed(KEY_ID),
        "response",
        None,
        details,
        effect["tenant_id"],
    ]


def _columns(row: list[Any]) -> list[list[Any]]:
    return [[value] for value in row]


def _lists(s: Samples) -> list[list[Any]]:
    """list_effects: no filter, then each filter and the cursor."""
    at, effect_id = s.succeeded["created_at"], s.succeeded["effect_id"]
    return [
        ["tenant-0", None, None, None, None, None, None, 50],
        [
            "tenant-0",
            ["outcome_unknown", "manual_review"],
            None,
            None,
            None,
            None,
            None,
            50,
        ],
        ["tenant-0", None, "route-3", None, None, None, None, 50],
        ["tenant-0", None, None, "op-12", None, None, None, 50],
        ["tenant-0", None, None, None, at, at, effect_id, 50],
    ]


def _running_call() -> list[Any]:
    return [new_id(), bytes(32), LEASE]


def _reseal_receipt(s: Samples) -> list[Any]:
    old = bytes(s.receipt["response_ciphertext"])
    fresh = _sealed("key-2", old[2 + len(KEY_ID) :])
    return [["tenant-0"], [s.receipt["effect_id"]], [old], [fresh]]


Case = Callable[[Samples], list[list[Any]]]
_FIRST_ID = uuid.UUID(int=0)

# Blocks that read a whole table on purpose: operator-run maintenance whose job is to
# visit every stored payload, never run per request or on a timer. The test checks
# they do scan, which also proves the counters it reads are counting.
SCANNING: Mapping[str, Case] = {
    # key rotation: counts every sealed payload by the key in its header
    "master_key_ids_of_payloads": lambda s: [[]],
    # key rotation: walks the payloads sealed under other keys, in effect id order
    "requests_not_under_key": lambda s: [["key-2", _FIRST_ID, 100]],
    "receipts_not_under_key": lambda s: [["key-2", _FIRST_ID, 100]],
}

# Every other block, with the parameter sets it runs with (each in its own rolled-back
# transaction): the paths a live ledger takes, a fresh key and a taken one.
CASES: Mapping[str, Case] = {
    "reserve": lambda s: [
        _reserve(s, "op-new", True),
        _reserve(s, "op-new", False),
        _reserve(s, s.succeeded["operation_key"], True),
    ],
    "start_attempt": lambda s: [_start(s.prepared), _start(s.retryable)],
    "reserve_batch": lambda s: [_reserve_batch(s)],
    "start_attempt_batch": lambda s: [_columns(_start(s.prepared))],
    "record_receipt_batch": lambda s: [_columns(_receipt(s.dispatching))],
    # the same three within one tenant, as a sharded ledger writes a batch
    "reserve_batch_of_tenant": lambda s: [[*_reserve_batch(s), "tenant-0"]],
    "start_attempt_batch_of_tenant": lambda s: [
        [*_columns(_start(s.prepared)), "tenant-0"]
    ],
    "record_receipt_batch_of_tenant": lambda s: [
        [*_columns(_receipt(s.dispatching)), "tenant-0"]
    ],
    "transition": lambda s: [
        [
            s.dispatching["effect_id"],
            s.dispatching["version"],
            "dispatching",
            "outcome_unknown",
            "timeout",
            "worker-a",
            None,
            None,
            timedelta(seconds=5),
            "timed out",
            "{}",
            None,
            "tenant-0",
        ],
    ],
    "record_receipt": lambda s: [_receipt(s.dispatching, details='{"a": 1}')],
    "reschedule": lambda s: [
        [
            s.retryable["effect_id"],
            s.retryable["version"],
            "retryable",
            timedelta(seconds=5),
            "worker-a",
            "busy",
            "tenant-0",
        ],
    ],
    "renew_lease": lambda s: [
        [
            s.dispatching["effect_id"],
            s.dispatching["version"],
            "worker-a",
            LEASE,
            "tenant-0",
        ],
    ],
    # the same five as calls of their functions, as a sharded ledger writes them
    "start_attempt_call": lambda s: [_start(s.prepared), _start(s.retryable)],
    "record_receipt_call": lambda s: [_receipt(s.dispatching, details='{"a": 1}')],
    "transition_call": lambda s: CASES["transition"](s),
    "reschedule_call": lambda s: CASES["reschedule"](s),
    "renew_lease_call": lambda s: CASES["renew_lease"](s),
    "claim_due": lambda s: [[10, "worker-b", LEASE]],
    "prune_settled": lambda s: [[["contract-0", "contract-1"], [HOUR, HOUR], 50]],
    # the same two, tenant by tenant, as a sharded ledger runs them (store/claims.py)
    "tenants_due": lambda s: [[10]],
    "claim_due_of_tenant": lambda s: [[10, "worker-b", LEASE, "tenant-0"]],
    "tenants_prunable": lambda s: [[["contract-0", "contract-1"], [HOUR, HOUR], 50]],
    "prune_settled_of_tenant": lambda s: [
        [["contract-0", "contract-1"], [HOUR, HOUR], 50, "tenant-0"]
    ],
    "get_effect": lambda s: [["tenant-0", s.succeeded["effect_id"]]],
    "effect_versions": lambda s: [
        [["tenant-0", "tenant-0"], [s.dispatching["effect_id"], s.succeeded["effect_id"]]]
    ],
    "get_effect_by_key": lambda s: [["tenant-0", s.succeeded["operation_key"]]],
    "list_effects": _lists,
    "get_receipt": lambda s: [["tenant-0", s.succeeded["effect_id"]]],
    "list_events": lambda s: [["tenant-0", s.succeeded["effect_id"]]],
    "list_attempts": lambda s: [["tenant-0", s.succeeded["effect_id"]]],
    "verify_events": lambda s: [["tenant-0", s.succeeded["effect_id"]]],
    "record_master_key": lambda s: [["key-3"]],
    "list_master_keys": lambda s: [[]],
    "ping": lambda s: [[]],
    "add_tenant": lambda s: [["tenant-new"]],
    "add_api_key": lambda s: [["key-new", "tenant-0", b"hash"]],
    "get_api_key": lambda s: [["key-new"]],
    "unknown_summary": lambda s: [[]],
    "recent_duplicate": lambda s: [
        ["tenant-0", s.succeeded["route"], s.succeeded["request_hash"], "op-new", DAY],
    ],
    "operation_key_usage": lambda s: [[HOUR], [DAY]],
    "ledger_tables_without_autovacuum": lambda s: [[]],
    "clock": lambda s: [[]],
    "reseal_requests": lambda s: [
        [
            ["tenant-0"],
            [s.succeeded["effect_id"]],
            [bytes(s.succeeded["request_ciphertext"])],
            [_sealed("key-2")],
        ],
    ],
    "reseal_receipts": lambda s: [_reseal_receipt(s)],
    "get_idempotency_root": lambda s: [[]],
    "add_idempotency_root": lambda s: [[_sealed(KEY_ID)]],
    "reseal_idempotency_root": lambda s: [[_sealed(KEY_ID), _sealed("key-2")]],
    "retire_master_keys": lambda s: [[[KEY_ID], ["key-2"]]],
    "begin_mcp_call": lambda s: [_running_call()],
    "end_mcp_call": lambda s: [[new_id()]],
    "mcp_call_running": lambda s: [[bytes(32)]],
}


# Every other block touches the few effects its parameters name (and their events,
# attempts and receipt): reading more than this means a plan walks an index instead of
# looking up its keys, which costs as much as a sequential scan on a large ledger.
FEW_ROWS = 100
# Blocks that read a page of a tenant's effects, up to their limit, filtered as they go.
READS_A_PAGE = frozenset({"list_effects"})


# The periodic blocks (a metrics scrape, the reconciler's timer, doctor) and the most
# rows one run may read, counted on the ledger before it runs: what the block is asked
# for (a limit, a window, the effects awaiting someone), never the whole ledger.
BOUNDS: Mapping[str, Callable[[list[Any]], list[Any]]] = {  # [query, *its arguments]
    # each claimed effect: its due row, its update, the event it chains to, and one
    "claim_due": lambda args: ["SELECT 5 * $1::int", args[0]],
    # each pruned effect with its attempt, receipt and three events, and one
    "prune_settled": lambda args: ["SELECT 8 * $1::int", args[2]],
    # Tenant by tenant (a sharded ledger): the due and settled indexes are shared by
    # the tenants of a shard, so a tenant's claim may step over its neighbours' rows;
    # bounded by those rows, never by the ledger's other columns or tables.
    "claim_due_of_tenant": lambda args: [
        "SELECT count(*) + 5 * $1::int FROM effects WHERE due_at <= now()",
        args[0],
    ],
    "prune_settled_of_tenant": lambda args: [
        "SELECT count(*) + 8 * $2::int FROM effects"
        " WHERE status IN ('succeeded', 'failed_final') AND contract_name = ANY($1)",
        args[0],
        args[2],
    ],
    # a sharded ledger's pruning timer: every effect past retention, to find the
    # tenants that have any (the prune of each tenant then takes at most its limit)
    "tenants_prunable": lambda args: [
        "SELECT count(*) + 1 FROM effects AS e"
        " JOIN unnest($1::text[], $2::interval[]) AS r (contract_name, kept_for)"
        " ON e.contract_name = r.contract_name"
        " WHERE e.status IN ('succeeded', 'failed_final')"
        " AND e.updated_at < now() - r.kept_for"
        " AND (e.retention_deadline IS NULL OR e.retention_deadline < now())",
        args[0],
        args[1],
    ],
    # the due effects, on the due index: the list of tenants takes no locks
    "tenants_due": lambda args: [
        "SELECT count(*) + 1 FROM effects WHERE due_at <= now()"
    ],
    "unknown_summary": lambda args: [
        "SELECT count(*) FROM effects"
        " WHERE status IN ('outcome_unknown', 'manual_review')"
    ],
    # the window's effects, and two index probes per tenant to find the tenants
    "operation_key_usage": lambda args: [
        f"SELECT count(*) + 2 * {TENANTS} FROM effects"
        " WHERE created_at > now() - $1::interval",
        args[0],
    ],
    # the expired rows it prunes, at most 100, each read to lock and read to delete
    "begin_mcp_call": lambda args: ["SELECT 2 * 100"],
}


def test_every_block_is_classified() -> None:
    """A new block must say whether it may scan before it can land."""
    blocks = set(queries())
    assert not set(SCANNING) & set(CASES), "a block is listed as scanning and not"
    unclassified = blocks - set(SCANNING) - set(CASES)
    assert not unclassified, f"add these blocks to CASES or SCANNING: {unclassified}"
    gone = (set(SCANNING) | set(CASES)) - blocks
    assert not gone, f"these classified blocks are no longer in queries.sql: {gone}"


@dataclass(frozen=True)
class Reads:
    """What one run of a statement read from the watched tables."""

    scans: dict[str, int]  # sequential scans, by table
    rows: int  # rows read by any scan: sequentially, or fetched through an index


async def _counters(conn: asyncpg.Connection) -> dict[str, tuple[int, int]]:
    rows = await conn.fetch(
        "SELECT relname::text, seq_scan,"
        " seq_tup_read + coalesce(idx_tup_fetch, 0) AS tuples"
        " FROM pg_stat_xact_user_tables WHERE relname = ANY($1::text[])",
        list(WATCHED_TABLES),
    )
    return {row["relname"]: (row["seq_scan"], row["tuples"]) for row in rows}


async def _reads_of(
    conn: asyncpg.Connection, sql: str, args: Sequence[Any], mode: str
) -> Reads:
    """What one run of ``sql`` read under plan cache ``mode``, rolled back after."""
    transaction = conn.transaction()
    await transaction.start()
    try:
        await conn.execute(f"SET LOCAL plan_cache_mode = {mode}")
        before = await _counters(conn)
        await conn.fetch(sql, *args)
        after = await _counters(conn)
    finally:
        await transaction.rollback()
    delta = {t: (n - before[t][0], rows - before[t][1]) for t, (n, rows) in after.items()}
    return Reads(
        scans={t: n for t, (n, _) in delta.items() if n},
        rows=sum(rows for _, rows in delta.values()),
    )


def _seq_scan_nodes(plan: Mapping[str, Any]) -> Iterator[str]:
    if plan["Node Type"] == "Seq Scan" and plan.get("Relation Name") in WATCHED_TABLES:
        yield plan["Relation Name"]
    for child in plan.get("Plans", ()):
        yield from _seq_scan_nodes(child)


async def _explained_scans(
    conn: asyncpg.Connection, sql: str, args: Sequence[Any]
) -> list[str]:
    document = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {sql}", *args)
    return list(_seq_scan_nodes(json.loads(document)[0]["Plan"]))


async def _samples(conn: asyncpg.Connection) -> Samples:
    succeeded = await effect_row(conn, "succeeded")
    receipt = await conn.fetchrow(
        "SELECT * FROM effect_receipts WHERE tenant_id = $1 AND effect_id = $2",
        succeeded["tenant_id"],
        succeeded["effect_id"],
    )
    return Samples(
        prepared=await effect_row(conn, "prepared"),
        dispatching=await effect_row(conn, "dispatching"),
        retryable=await effect_row(conn, "retryable"),
        succeeded=succeeded,
        receipt=receipt,
    )


async def test_no_runtime_statement_scans_an_unanalyzed_ledger(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await fill_ledger(conn)
        samples = await _samples(conn)
        for name, case in SCANNING.items():
            for args in case(samples):
                reads = await _reads_of(conn, queries()[name], args, PLAN_MODES[0])
                assert reads.scans, f"{name} reads on an index now: move it to CASES"
        scans = await _whole_table_reads(conn, samples, bounded=True)
        # The planner still knew nothing but the tables' sizes when the plans were made.
        assert all(tuples < 0 for tuples in (await never_analyzed(conn)).values())
    finally:
        await conn.close()
    assert not scans, "statements read a whole table:\n" + _listed(scans)


async def _whole_table_reads(
    conn: asyncpg.Connection,
    samples: Samples,
    *,
    bounded: bool,
    modes: Sequence[str] = PLAN_MODES,
) -> dict[str, object]:
    """Each ``CASES`` block's sequential scans of a watched table, in its EXPLAIN and in
    one run under each plan mode, and (``bounded``) its reads past its ``BOUNDS``, or
    past ``FEW_ROWS`` for a block that touches a few given effects."""
    scans: dict[str, object] = {}
    for name, case in CASES.items():
        sql = queries()[name]
        for i, args in enumerate(case(samples)):
            explained = await _explained_scans(conn, sql, args)
            if explained:
                scans[f"{name}[{i}] EXPLAIN"] = explained
            most: int | None = None
            if bounded and name in BOUNDS:
                most = await conn.fetchval(*BOUNDS[name](args))
            elif bounded and name not in READS_A_PAGE:
                most = FEW_ROWS
            for mode in modes:
                reads = await _reads_of(conn, sql, args, mode)
                if reads.scans:
                    scans[f"{name}[{i}] {mode}"] = reads.scans
                if most is not None and reads.rows > most:
                    scans[f"{name}[{i}] {mode} rows"] = f"{reads.rows}, over {most}"
    return scans


def _listed(scans: Mapping[str, object]) -> str:
    return "\n".join(f"  {where}: {what}" for where, what in scans.items())


def _absent(status: str) -> dict[str, Any]:
    """An effect of tenant 0 that is not stored: on an empty ledger the parameters
    only need the right types, since the plan is what is measured."""
    at = datetime.now(UTC)
    return {
        "effect_id": new_id(),
        "tenant_id": "tenant-0",
        "operation_key": f"op-absent-{status}",
        "version": 3,
        "status": status,
        "route": "route-0",
        "request_hash": "hash-absent",
        "request_ciphertext": _sealed(KEY_ID),
        "response_ciphertext": _sealed(KEY_ID),
        "created_at": at,
    }


async def test_plans_made_on_an_empty_ledger_stay_on_their_indexes(
    store: Store, database_url: str
) -> None:
    """What a new deployment does: its connections plan every statement while the
    ledger is empty, and keep those plans (a pool's generic plans, plpgsql's) as it
    grows. Planned for a table that looks empty, a read of the whole table is the
    cheapest plan, so the store's connections must rule it out themselves."""
    samples = Samples(
        prepared=_absent("prepared"),
        dispatching=_absent("dispatching"),
        retryable=_absent("retryable"),
        succeeded=_absent("succeeded"),
        receipt=_absent("succeeded"),
    )
    grower = await asyncpg.connect(database_url)
    try:
        for statement in AUTOVACUUM_OFF:  # DDL: before the plans are made
            await grower.execute(statement)
        async with store._pool.acquire() as conn:  # the store's own, as it opens them
            assert await conn.fetchval("SELECT count(*) FROM effects") == 0
            # What the blocks' parameters refer to outside the ledger's own tables.
            await conn.execute("INSERT INTO tenants (tenant_id) VALUES ('tenant-0')")
            await conn.execute(
                "INSERT INTO master_keys (key_id) VALUES ('key-1'), ('key-2')"
            )
            scans = await _whole_table_reads(conn, samples, bounded=False)
            assert not scans, "plans made on an empty ledger read a whole table:\n" + (
                _listed(scans)
            )
            # The ledger grows under those plans (written by another session, so
            # nothing here makes this one plan again), still never analyzed.
            await fill_ledger(grower, autovacuum_off=False)
            walks = await _whole_table_reads(
                conn, await _samples(conn), bounded=True, modes=PLAN_MODES[1:]
            )
    finally:
        await grower.close()
    assert not walks, (
        "plans made on an empty ledger read far more than they are asked for once it "
        "has grown:\n" + _listed(walks)
    )
