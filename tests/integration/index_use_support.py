"""A ledger of a realistic size that PostgreSQL has never analyzed, for plan tests.

A brand-new ledger on a server with autovacuum off is never analyzed: the planner
knows only each table's size on disk and guesses every selectivity. Rows are written
by plain ``INSERT ... SELECT`` over ``generate_series`` (the ledger tables have no
insert triggers, and the digests of this fake history are never verified), with
autovacuum switched off on each table first so nothing analyzes it behind the test.

Effect ``i`` belongs to ``tenant-{i % TENANTS}``, has operation key ``op-{i}`` and the
status ``status_of(i)``; it has three events and one attempt, and a receipt once
settled. Its id is read back by key (``effect_ids``), never computed twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import asyncpg

EFFECTS = 30_000
TENANTS = 20
ROUTES = 8
LEDGER_TABLES = ("effects", "effect_events", "effect_attempts", "effect_receipts")
# The tables no runtime statement may read whole: the ledger, and the running MCP calls.
WATCHED_TABLES = (*LEDGER_TABLES, "mcp_running_calls")

# Status by i % 97 (coprime with TENANTS, so every tenant has effects of every status):
# the few effects awaiting something that a live ledger has, among many settled ones.
_STATUS_SQL = """
    CASE i % 97
        WHEN 0 THEN 'outcome_unknown' WHEN 1 THEN 'manual_review'
        WHEN 2 THEN 'dispatching' WHEN 3 THEN 'dispatching'
        WHEN 4 THEN 'retryable' WHEN 5 THEN 'prepared' WHEN 6 THEN 'failed_final'
        WHEN 7 THEN 'reconciling' ELSE 'succeeded' END"""

STATUS_BY_RESIDUE = {
    0: "outcome_unknown",
    1: "manual_review",
    2: "dispatching",
    4: "retryable",
    5: "prepared",
    6: "failed_final",
    7: "reconciling",
    8: "succeeded",
}

# A sealed payload's header: format byte 1, the key id's length, the key id.
KEY_ID = "key-1"
SEALED_PREFIX_SQL = f"'\\x01{len(KEY_ID):02x}'::bytea || convert_to('{KEY_ID}', 'UTF8')"


#: Nothing analyzes the tables behind the test. These are DDL, which makes every
#: session plan its statements again: run them before the plans a test watches are made.
AUTOVACUUM_OFF = tuple(
    f"ALTER TABLE {table} SET (autovacuum_enabled = false)" for table in WATCHED_TABLES
)


def _fill(effects: int) -> list[str]:
    """The statements that write a ledger of ``effects`` effects (no DDL among them)."""
    return [
        f"""INSERT INTO tenants (tenant_id)
            SELECT 'tenant-' || t FROM generate_series(0, {TENANTS - 1}) AS t
            ON CONFLICT DO NOTHING""",
        """INSERT INTO master_keys (key_id) VALUES ('key-1'), ('key-2')
            ON CONFLICT DO NOTHING""",
        # Recorded MCP calls, most expired: the rows begin_mcp_call prunes.
        """INSERT INTO mcp_running_calls (running_id, call_key, expires_at)
            SELECT gen_random_uuid(), sha256(convert_to('call' || i, 'UTF8')),
                   now() + (i - 4000) * interval '1 second'
            FROM generate_series(1, 5000) AS i""",
        # Created one a second, the newest a few seconds ago; settled a second later.
        f"""INSERT INTO effects (
                effect_id, tenant_id, operation_key, request_hash, route, contract_name,
                contract_version, safety, downstream_key, status, version, attempts,
                lease_owner, lease_expires_at, due_at, first_dispatched_at,
                retention_deadline, settlement_deadline, request_ciphertext,
                request_preview, created_at, updated_at)
            SELECT gen_random_uuid(), 'tenant-' || i % {TENANTS}, 'op-' || i,
                   md5('request' || i % 25000), 'route-' || i % {ROUTES},
                   'contract-' || i % {ROUTES}, '1', 'idempotent', md5('downstream' || i),
                   s.status, 3, 1,
                   CASE WHEN s.status IN ('dispatching', 'prepared', 'reconciling')
                        THEN 'worker-a' END,
                   CASE WHEN s.status IN ('dispatching', 'prepared', 'reconciling')
                        THEN now() + interval '30 seconds' END,
                   CASE WHEN s.status IN ('dispatching', 'prepared', 'reconciling')
                        THEN now() + interval '30 seconds'
                        WHEN s.status IN ('retryable', 'outcome_unknown')
                        THEN t.at + interval '5 seconds' END,
                   t.at, t.at + interval '1 hour', t.at + interval '1 day',
                   {SEALED_PREFIX_SQL} || decode(md5(i::text), 'hex'),
                   jsonb_build_object('amount', i), t.at, t.at + interval '1 second'
            FROM generate_series(1, {effects}) AS i,
                 LATERAL (SELECT {_STATUS_SQL} AS status) AS s,
                 LATERAL (SELECT now() - ({effects} - i + 5) * interval '1 second' AS at)
                     AS t""",
        """INSERT INTO effect_attempts (tenant_id, effect_id, attempt_no, owner,
                                        started_at)
            SELECT tenant_id, effect_id, 1, 'worker-a', created_at FROM effects""",
        """INSERT INTO effect_events (tenant_id, effect_id, seq, kind, from_status,
                                      to_status, actor, details, occurred_at, prev_digest,
                                      digest)
            SELECT e.tenant_id, e.effect_id, ev.seq, ev.kind, ev.from_status,
                   CASE WHEN ev.seq = 3 THEN e.status ELSE ev.to_status END, 'worker-a',
                   '{}'::jsonb, e.created_at,
                   CASE WHEN ev.seq = 1 THEN '\\x'::bytea ELSE d.digest END, d.digest
            FROM effects AS e CROSS JOIN (VALUES
                (1, 'reserved', NULL, 'prepared'),
                (2, 'dispatch', 'prepared', 'dispatching'),
                (3, 'settled', 'dispatching', NULL)
            ) AS ev (seq, kind, from_status, to_status),
            LATERAL (SELECT sha256(convert_to(ev.kind, 'UTF8')) AS digest) AS d""",
        f"""INSERT INTO effect_receipts (tenant_id, effect_id, status_code,
                                         response_ciphertext, source, recorded_at)
            SELECT tenant_id, effect_id,
                   CASE WHEN status = 'succeeded' THEN 200 ELSE 422 END,
                   {SEALED_PREFIX_SQL} || decode(md5(effect_id::text), 'hex'), 'response',
                   updated_at
            FROM effects WHERE status IN ('succeeded', 'failed_final')""",
    ]


async def fill_ledger(
    conn: asyncpg.Connection, effects: int = EFFECTS, *, autovacuum_off: bool = True
) -> None:
    """Write the realistic ledger; nothing here analyzes a table. Without
    ``autovacuum_off`` the caller has run ``AUTOVACUUM_OFF`` already."""
    async with conn.transaction():
        # Row by row foreign-key checks would double the time the rows take to write.
        await conn.execute("SET LOCAL session_replication_role = replica")
        for statement in (*(AUTOVACUUM_OFF if autovacuum_off else ()), *_fill(effects)):
            await conn.execute(statement)


def operation_key(
    status: str, *, effects: int = EFFECTS, tenant: int = 0, nth: int = 0
) -> tuple[str, str]:
    """(tenant id, operation key) of the ``nth`` effect of ``tenant`` in ``status``."""
    residue = next(r for r, s in STATUS_BY_RESIDUE.items() if s == status)
    found = [
        i
        for i in range(1, effects + 1)
        if i % TENANTS == tenant and min(i % 97, 8) == residue
    ]
    return f"tenant-{tenant}", f"op-{found[-1 - nth]}"


async def effect_row(
    conn: asyncpg.Connection, status: str, *, effects: int = EFFECTS, nth: int = 0
) -> asyncpg.Record:
    """A stored effect of tenant 0 in ``status`` (read before any measured statement)."""
    tenant_id, key = operation_key(status, effects=effects, nth=nth)
    row = await conn.fetchrow(
        "SELECT * FROM effects WHERE tenant_id = $1 AND operation_key = $2",
        tenant_id,
        key,
    )
    assert row is not None and row["status"] == status, (status, key)
    return row


async def never_analyzed(conn: asyncpg.Connection) -> Mapping[str, float]:
    """pg_class.reltuples of each ledger table: -1 until a VACUUM or ANALYZE ran."""
    rows = await conn.fetch(
        "SELECT relname::text, reltuples FROM pg_class WHERE relname = ANY($1::text[])",
        list(WATCHED_TABLES),
    )
    return {row["relname"]: row["reltuples"] for row in rows}


def new_id() -> uuid.UUID:
    return uuid.uuid4()
