"""The ledger as the crash matrix reads it: the effect's row and its event history.

The matrix audits the ledger from outside, with SQL of its own rather than the store's
queries, so that a bug in those queries cannot hide from the proof.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import asyncpg

from effect_broker.demo.crash_matrix.processes import poll

SETTLE_TIMEOUT = 30.0  # the ledger settles (or provably stops moving) within this


@dataclass(frozen=True)
class Ledger:
    """The effect's row as the ledger has it, plus what the table shows about it."""

    status: str
    attempts: int
    version: int
    due: bool
    lease_owner: str | None
    receipt_source: str | None
    last_actor: str
    absences_proven: int = 0  # transactional: tombstones that proved an attempt absent

    def at_rest(self, mode: str) -> bool:
        """Nothing will move this effect any more, so it can be judged.

        Settled is at rest. ``manual_review`` with nothing due and no lease holder
        waits for a person. ``outcome_unknown`` is a resting state only for an unsafe
        target: for the other classes the reconciler always has a next look scheduled,
        and a row that shows it unknown with nothing due is a worker mid-step (it
        drops the dead holder's lease, then dispatches or probes).
        """
        if self.status in ("succeeded", "failed_final"):
            return True
        waiting = not self.due and self.lease_owner is None
        if self.status == "manual_review":
            return waiting
        return self.status == "outcome_unknown" and waiting and mode == "unsafe"


LEDGER_ROW = """
SELECT e.effect_id, e.status, e.attempts, e.version, e.due_at IS NOT NULL AS due,
       e.lease_owner, r.source AS receipt_source,
       (SELECT actor FROM effect_events v
        WHERE v.tenant_id = e.tenant_id AND v.effect_id = e.effect_id
        ORDER BY seq DESC LIMIT 1) AS last_actor,
       (SELECT count(*) FROM effect_events v
        WHERE v.tenant_id = e.tenant_id AND v.effect_id = e.effect_id
        AND v.kind = 'absence_proven') AS absences_proven  -- a tombstone's proof
FROM effects e LEFT JOIN effect_receipts r USING (tenant_id, effect_id)
WHERE e.tenant_id = $1 AND e.operation_key = $2
"""
CLAIMED_BY = """
SELECT EXISTS (
    SELECT 1 FROM effects e JOIN effect_events v USING (tenant_id, effect_id)
    WHERE e.tenant_id = $1 AND e.operation_key = $2
      AND v.kind = 'claimed' AND v.actor LIKE $3)
"""
#: Events the first proxy ($3) wrote after the second ($4) first claimed the effect. A
#: fenced write changes nothing and writes no event, so this must be 0.
WRITES_AFTER_TAKEOVER = """
SELECT count(*) FROM effects e JOIN effect_events v USING (tenant_id, effect_id)
WHERE e.tenant_id = $1 AND e.operation_key = $2 AND v.actor LIKE $3
  AND v.seq > (SELECT min(w.seq) FROM effect_events w
               WHERE w.tenant_id = e.tenant_id AND w.effect_id = e.effect_id
                 AND w.kind = 'claimed' AND w.actor LIKE $4)
"""
EVENTS_OF_KIND = """
SELECT count(*) FROM effects e JOIN effect_events v USING (tenant_id, effect_id)
WHERE e.tenant_id = $1 AND e.operation_key = $2 AND v.kind = $3
"""
HISTORY = """
SELECT v.seq, v.occurred_at, v.kind, v.from_status, v.to_status, v.actor, v.details
FROM effects e JOIN effect_events v USING (tenant_id, effect_id)
WHERE e.tenant_id = $1 AND e.operation_key = $2
ORDER BY v.seq
"""


@dataclass
class LedgerReader:
    """One cell's effect (``tenant``, ``operation_key``) on that cell's database."""

    conn: asyncpg.Connection
    tenant: str
    operation_key: str

    async def ledger(self) -> Ledger | None:
        row = await self.conn.fetchrow(LEDGER_ROW, self.tenant, self.operation_key)
        if row is None:
            return None
        return Ledger(
            status=row["status"],
            attempts=row["attempts"],
            version=row["version"],
            due=row["due"],
            lease_owner=row["lease_owner"],
            receipt_source=row["receipt_source"],
            last_actor=row["last_actor"],
            absences_proven=row["absences_proven"],
        )

    async def settled_ledger(self, mode: str) -> Ledger:
        """Poll until the effect is settled, or provably stays where it is."""

        async def look() -> Ledger | None:
            ledger = await self.ledger()
            return ledger if ledger is not None and ledger.at_rest(mode) else None

        return await poll(look, timeout=SETTLE_TIMEOUT, what="the ledger to settle")

    async def writes_after_takeover(
        self, zombie_actors: str, successor_actors: str
    ) -> int:
        """Events by ``zombie_actors`` (a LIKE pattern) after the successor's claim."""
        count: int = await self.conn.fetchval(
            WRITES_AFTER_TAKEOVER,
            self.tenant,
            self.operation_key,
            zombie_actors,
            successor_actors,
        )
        return count

    async def events_of(self, kind: str) -> int:
        """How many events of ``kind`` the effect's history holds."""
        count: int = await self.conn.fetchval(
            EVENTS_OF_KIND, self.tenant, self.operation_key, kind
        )
        return count

    async def claimed_by(self, actors: str) -> bool:
        """Whether a process matching ``actors`` (a LIKE pattern) claimed the effect."""
        found: bool = await self.conn.fetchval(
            CLAIMED_BY, self.tenant, self.operation_key, actors
        )
        return found

    async def write_history(self, path: Path) -> None:
        """The effect's event history as text, next to the process logs, for debugging."""
        rows = await self.conn.fetch(HISTORY, self.tenant, self.operation_key)
        lines = [
            f"{row['seq']:>3} {row['occurred_at']:%H:%M:%S.%f} {row['kind']:<16} "
            f"{row['from_status'] or '-'} -> {row['to_status']}  by {row['actor']}  "
            f"{row['details']}"
            for row in rows
        ]
        path.write_text("\n".join(lines) + "\n")
