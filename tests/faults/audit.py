"""After a fault: what the agent was told, against the target's table and the ledger.

The target's SQLite ``charges`` table says what really happened; the ledger says what
the proxy recorded; the agent's replies say what it claimed. The rules (from the fault
suite's brief):

* every 2xx the agent got has exactly one charge and a receipt;
* an answer that says nothing was sent (``upstream-unreachable``, ``upstream-busy``,
  ``store-unavailable``) has no charge made while it was being answered, unless the
  reconciler sent the effect meanwhile (a charge after it is a later retry's);
* after the retries, idempotent and reconcilable operations have exactly one charge
  each and unsafe ones at most one;
* no effect is left non-terminal except unsafe unknowns (that really were sent, where
  the proxy could know that).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter, defaultdict
from collections.abc import Sequence
from contextlib import closing, suppress
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from tests.faults.load import Op, Reply
from tests.faults.procs import TENANT, FaultSetupError, poll

SETTLED = frozenset({"succeeded", "failed_final"})
#: Every non-2xx answer the agent may get in these scenarios; each says whether the
#: effect may have been sent. Anything else (a 500, say) is reported.
EXPECTED = frozenset(
    {
        "409 in-flight",
        "409 outcome-unknown",
        "502 outcome-unknown",
        "504 outcome-unknown",
        "502 upstream-unreachable",
        "503 upstream-busy",
        "503 store-unavailable",
    }
)
#: How long before a charge a reconciler attempt may have started and still explain it.
RECONCILER_WINDOW = 30.0

EFFECTS = """
SELECT e.operation_key, e.status, e.safety, e.due_at IS NOT NULL AS due, e.lease_owner,
       r.status_code AS receipt_status
FROM effects e LEFT JOIN effect_receipts r USING (tenant_id, effect_id)
WHERE e.tenant_id = $1
"""
ATTEMPTS = """
SELECT e.operation_key, a.owner, extract(epoch FROM a.started_at)::float8 AS started
FROM effect_attempts a JOIN effects e USING (tenant_id, effect_id)
WHERE e.tenant_id = $1
"""


@dataclass(frozen=True)
class Ledger:
    status: str
    safety: str
    due: bool
    lease_owner: str | None
    receipt_status: int | None

    def at_rest(self) -> bool:
        """Nothing will move it any more: settled, or waiting for a person."""
        if self.status in SETTLED:
            return True
        idle = not self.due and self.lease_owner is None
        if self.status == "manual_review":
            return idle
        return self.status == "outcome_unknown" and self.safety == "unsafe" and idle


@dataclass
class Evidence:
    effects: dict[str, Ledger]
    attempts: dict[str, list[tuple[str, float]]]
    charges: dict[str, list[float]]  # order id (= operation key) -> created_at


async def read_ledger(
    dsn: str,
) -> tuple[dict[str, Ledger], dict[str, list[tuple[str, float]]]]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(EFFECTS, TENANT)
        attempt_rows = await conn.fetch(ATTEMPTS, TENANT)
    finally:
        await conn.close()
    effects = {
        row["operation_key"]: Ledger(
            row["status"],
            row["safety"],
            row["due"],
            row["lease_owner"],
            row["receipt_status"],
        )
        for row in rows
    }
    attempts: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for row in attempt_rows:
        attempts[row["operation_key"]].append((row["owner"], row["started"]))
    return effects, attempts


def read_charges(target_db: Path) -> dict[str, list[float]]:
    with closing(sqlite3.connect(target_db)) as conn:
        rows = conn.execute("SELECT order_id, created_at FROM charges").fetchall()
    charges: dict[str, list[float]] = defaultdict(list)
    for order_id, created in rows:
        charges[order_id].append(float(created))
    return charges


async def settle_and_collect(dsn: str, target_db: Path, *, timeout: float) -> Evidence:
    """Wait (polling, with a deadline) until the reconciler has nothing left to do,
    then read both sides. A ledger that never comes to rest is reported, not hidden."""

    async def at_rest() -> bool | None:
        effects, _ = await read_ledger(dsn)
        return True if all(e.at_rest() for e in effects.values()) else None

    # A ledger that never comes to rest is not an error here: the audit names every
    # effect still moving.
    with suppress(FaultSetupError):
        await poll(at_rest, timeout=timeout, what="the ledger to come to rest")
    effects, attempts = await read_ledger(dsn)
    charges = await asyncio.to_thread(read_charges, target_db)
    return Evidence(effects, attempts, charges)


@dataclass
class Audit:
    scenario: str
    ops: Sequence[Op]
    fault_replies: Sequence[Reply]
    retry_replies: Sequence[Reply]
    evidence: Evidence
    strict_unsafe: bool = True  # the proxy could know whether an unsafe effect left
    violations: list[str] = field(default_factory=list)

    def check(self) -> list[str]:
        for op in self.ops:
            self._check_op(op)
        return self.violations

    def _check_op(self, op: Op) -> None:
        replies = [r for r in (*self.fault_replies, *self.retry_replies) if r.op == op]
        charges = self.evidence.charges.get(op.key, [])
        ledger = self.evidence.effects.get(op.key)
        say = self.violations.append
        receipt_2xx = ledger is not None and 200 <= (ledger.receipt_status or 0) < 300
        if any(r.ok for r in replies) and (len(charges) != 1 or not receipt_2xx):
            say(
                f"{op.key} ({op.mode}): got a 2xx but has {len(charges)} charge(s), "
                f"ledger {ledger}"
            )
        for reply in replies:
            if reply.status is not None and not reply.ok and reply.kind not in EXPECTED:
                say(
                    f"{op.key} ({op.mode}): answered {reply.kind}, which does not say "
                    "whether anything was sent"
                )
            if reply.nothing_sent:
                for created in charges:
                    if (
                        reply.started <= created <= reply.finished
                        and not self._reconciled(op, created)
                    ):
                        say(
                            f"{op.key} ({op.mode}): answered {reply.kind} (nothing "
                            f"sent), yet the target charged it while answering"
                        )
        if op.mode == "unsafe":
            if len(charges) > 1:
                say(f"{op.key} (unsafe): {len(charges)} charges, a proxy-made duplicate")
        elif len(charges) != 1:
            say(f"{op.key} ({op.mode}): {len(charges)} charges after the retries")
        if ledger is None:
            if charges:
                say(f"{op.key} ({op.mode}): charged but not in the ledger")
            return
        if ledger.status in SETTLED:
            return
        unsafe_unknown = ledger.safety == "unsafe" and ledger.status == "outcome_unknown"
        if not unsafe_unknown or not ledger.at_rest():
            say(f"{op.key} ({op.mode}): left {ledger.status}")
        elif self.strict_unsafe and not charges:
            say(
                f"{op.key} (unsafe): left outcome_unknown, but the target has no charge "
                f"and the proxy answered {[r.kind for r in replies]}"
            )

    def _reconciled(self, op: Op, created: float) -> bool:
        return any(
            owner.startswith("reconciler@")
            and created - RECONCILER_WINDOW <= at <= created
            for owner, at in self.evidence.attempts.get(op.key, [])
        )

    def table(self) -> str:
        charges = self.evidence.charges
        keys = {op.key for op in self.ops}
        total = sum(len(charges.get(key, [])) for key in keys)
        duplicates = sum(len(charges.get(key, [])) > 1 for key in keys)
        statuses = Counter(
            f"{e.safety}:{e.status}"
            for k, e in self.evidence.effects.items()
            if k in keys
        )
        lines = [f"== {self.scenario}: {len(self.ops)} operations"]
        for phase, replies in (
            ("under fault", self.fault_replies),
            ("retries", self.retry_replies),
        ):
            kinds = Counter(reply.kind for reply in replies)
            ok = kinds.pop("2xx", 0)
            rest = ", ".join(f"{kind}: {n}" for kind, n in sorted(kinds.items()))
            lines.append(
                f"  {phase:<12} sent {len(replies):>4}  2xx {ok:>4}  {rest or '-'}"
            )
        lines.append(
            f"  charges {total}  duplicates {duplicates}  "
            f"ledger {dict(sorted(statuses.items()))}"
        )
        lines.append(f"  violations {len(self.violations)}")
        lines += [f"    {v}" for v in self.violations[:20]]
        return "\n".join(lines)
