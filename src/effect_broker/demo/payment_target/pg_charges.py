"""Transactional mode's charges: a PostgreSQL table, written with the target kit.

The charge's INSERT and the kit's receipt for the attempt key share one transaction,
the receipt last, so the proxy's tombstone and the charge can never both commit. The
``charges`` table here is the ground truth for this mode, as the SQLite table is for
the others; it needs no unique key of its own, the kit's table decides.

The low-level kit API is used (``prior``, ``record``) rather than ``run_attempt``, so
that the fault holds can stop the transaction at both points that matter.
"""

from __future__ import annotations

import secrets
from typing import Any

import asyncpg

from effect_broker.demo.payment_target.charges import ChargeRequest, encode
from effect_broker.demo.payment_target.faults import Faults
from effect_broker.target import (
    AttemptTaken,
    StoredAnswer,
    Tombstoned,
    answer_for,
    tombstoned_answer,
)
from effect_broker.target import asyncpg as kit

SCHEMA = """
CREATE TABLE IF NOT EXISTS charges (
    id             text PRIMARY KEY,
    mode           text NOT NULL CHECK (mode = 'transactional'),
    attempt_key    text NOT NULL,
    payload_sha256 text NOT NULL,
    amount         bigint NOT NULL,
    currency       text NOT NULL,
    order_id       text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS charges_order_id ON charges (order_id);
"""

INSERT = (
    "INSERT INTO charges (id, mode, attempt_key, payload_sha256, amount, currency,"
    " order_id) VALUES ($1, 'transactional', $2, $3, $4, $5, $6)"
)


class PgChargeStore:
    """The transactional charges, on a small asyncpg pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    @classmethod
    async def open(cls, database_url: str) -> PgChargeStore:
        """Connect, and create this target's table and the kit's (both idempotent)."""
        pool = await asyncpg.create_pool(database_url, min_size=1, max_size=10)
        async with pool.acquire() as conn:
            await conn.execute(SCHEMA)
            await kit.install(conn)
        return cls(pool)

    async def close(self) -> None:
        await self.pool.close()

    async def charge(
        self, attempt_key: str, charge: ChargeRequest, faults: Faults
    ) -> tuple[str, StoredAnswer]:
        """Charge once per attempt key; (what happened, the answer to send)."""
        subject = f"attempt={attempt_key}"
        async with self.pool.acquire() as conn:
            try:
                async with conn.transaction():
                    found = await kit.prior(conn, attempt_key)
                    if isinstance(found, StoredAnswer):
                        return "replayed", found
                    if isinstance(found, Tombstoned):
                        return "refused (tombstoned)", tombstoned_answer(attempt_key)
                    charge_id = f"ch_{secrets.token_hex(12)}"
                    await conn.execute(
                        INSERT,
                        charge_id,
                        attempt_key,
                        charge.payload_sha256,
                        charge.amount,
                        charge.currency,
                        charge.order_id,
                    )
                    body = encode(
                        {
                            "id": charge_id,
                            "amount": charge.amount,
                            "currency": charge.currency,
                            "order_id": charge.order_id,
                            "status": "succeeded",
                        }
                    )
                    answer = StoredAnswer(201, {"Content-Type": "application/json"}, body)
                    await faults.hold("hold_before_receipt", subject)
                    await kit.record(conn, attempt_key, answer)
                    await faults.hold("hold_before_commit", subject)
                return f"created {charge_id}", answer
            except AttemptTaken:
                taken = answer_for(await kit.lookup(conn, attempt_key))
                return f"lost the attempt key (rolled back), {taken.status}", taken

    async def list_charges(self, order_id: str | None = None) -> list[dict[str, Any]]:
        rows = await self.pool.fetch(
            "SELECT id, mode, NULL AS idempotency_key, NULL AS correlation_id,"
            " order_id, amount, attempt_key FROM charges"
            " WHERE $1::text IS NULL OR order_id = $1 ORDER BY created_at, id",
            order_id,
        )
        return [dict(row) for row in rows]

    async def count(self, order_id: str | None = None) -> int:
        n = await self.pool.fetchval(
            "SELECT count(*) FROM charges WHERE $1::text IS NULL OR order_id = $1",
            order_id,
        )
        return int(n)
