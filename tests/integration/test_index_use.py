"""Every runtime statement stays on its index on a ledger PostgreSQL never analyzed.

A brand-new ledger on a server with autovacuum off is never analyzed, and a plan that
reads a whole table gets slower with every effect written (throughput halved within
half a minute at c=64 before this test existed). Each named block of ``queries.sql``
runs here, with representative parameters and rolled back, against a ledger of a
realistic size; the test counts the sequential scans of the watched tables in
``pg_stat_xact_user_tables``, which covers the statements run inside plpgsql functions,
triggers and foreign-key checks too, under both a custom and a generic plan (asyncpg
prepares every statement, and a cached generic plan is what a pool keeps using).
EXPLAIN of each top-level statement adds the branches one run does not reach.

A block that reads a whole table on purpose is listed in ``SCANNING`` with why; a
block in neither list fails the test, so a new query must be classified to land.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import asyncpg

from effect_broker.store.sql import queries
from tests.integration.index_use_support import (
    KEY_ID,
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

    prepared: asyncpg.Record
    dispatching: asyncpg.Record
    retryable: asyncpg.Record
    succeeded: asyncpg.Record
    receipt: asyncpg.Record


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


def _start(effect: asyncpg.Record) -> list[Any]:
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


def _receipt(effect: asyncpg.Record, details: str = "{}") -> list[Any]:
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
    "claim_due": lambda s: [[10, "worker-b", LEASE]],
    "prune_settled": lambda s: [[["contract-0", "contract-1"], [HOUR, HOUR], 50]],
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


def test_every_block_is_classified() -> None:
    """A new block must say whether it may scan before it can land."""
    blocks = set(queries())
    assert not set(SCANNING) & set(CASES), "a block is listed as scanning and not"
    unclassified = blocks - set(SCANNING) - set(CASES)
    assert not unclassified, f"add these blocks to CASES or SCANNING: {unclassified}"
    gone = (set(SCANNING) | set(CASES)) - blocks
    assert not gone, f"these classified blocks are no longer in queries.sql: {gone}"


async def _seq_scans(conn: asyncpg.Connection) -> dict[str, int]:
    rows = await conn.fetch(
        "SELECT relname::text, seq_scan FROM pg_stat_xact_user_tables "
        "WHERE relname = ANY($1::text[])",
        list(WATCHED_TABLES),
    )
    return {row["relname"]: row["seq_scan"] for row in rows}


async def _scanned_by(
    conn: asyncpg.Connection, sql: str, args: Sequence[Any], mode: str
) -> dict[str, int]:
    """The watched tables one run of ``sql`` read sequentially, rolled back after."""
    transaction = conn.transaction()
    await transaction.start()
    try:
        await conn.execute(f"SET LOCAL plan_cache_mode = {mode}")
        before = await _seq_scans(conn)
        await conn.fetch(sql, *args)
        after = await _seq_scans(conn)
    finally:
        await transaction.rollback()
    return {
        t: after.get(t, 0) - before.get(t, 0)
        for t in after
        if after[t] != before.get(t, 0)
    }


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
                scanned = await _scanned_by(conn, queries()[name], args, PLAN_MODES[0])
                assert scanned, f"{name} reads on an index now: move it to CASES"
        scans: dict[str, object] = {}
        for name, case in CASES.items():
            sql = queries()[name]
            for i, args in enumerate(case(samples)):
                explained = await _explained_scans(conn, sql, args)
                if explained:
                    scans[f"{name}[{i}] EXPLAIN"] = explained
                for mode in PLAN_MODES:
                    scanned = await _scanned_by(conn, sql, args, mode)
                    if scanned:
                        scans[f"{name}[{i}] {mode}"] = scanned
        # The planner still knew nothing but the tables' sizes when the plans were made.
        assert all(tuples < 0 for tuples in (await never_analyzed(conn)).values())
    finally:
        await conn.close()
    assert not scans, "statements read a whole table:\n" + "\n".join(
        f"  {where}: {what}" for where, what in scans.items()
    )
