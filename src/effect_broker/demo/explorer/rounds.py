"""Rounds of exploration: each a fresh ledger and target, K proxies, M agents and the
faults of its seed; then the ledger settles, everything stops, and the oracle judges.

Executions are counted only after every process of the round has stopped, so a late
send (a proxy thawed at the very end) is counted too, never missed.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from effect_broker import failpoints
from effect_broker.demo.crash_matrix.matrix import Matrix
from effect_broker.demo.crash_matrix.processes import CellError, poll
from effect_broker.demo.crash_matrix.verdicts import TRANSACTIONAL
from effect_broker.demo.explorer.agents import Agents
from effect_broker.demo.explorer.cluster import TARGET_DB, TENANT, Cluster
from effect_broker.demo.explorer.faults import FaultPlayer
from effect_broker.demo.explorer.oracle import (
    SETTLED,
    Answer,
    Execution,
    LedgerRow,
    Verdict,
    judge,
)
from effect_broker.demo.explorer.postgres import OwnedPostgres
from effect_broker.demo.explorer.schedule import Schedule

SETTLE_TIMEOUT = 30.0  # the reconcilers bring the ledger to rest within this

EFFECTS = """
SELECT e.operation_key, e.status, e.safety, e.due_at IS NOT NULL AS due, e.lease_owner,
       r.status_code AS receipt_status
FROM effects e LEFT JOIN effect_receipts r USING (tenant_id, effect_id)
WHERE e.tenant_id = $1
"""


@dataclass(frozen=True)
class RoundResult:
    schedule: Schedule
    verdict: Verdict
    applied: tuple[str, ...]
    seconds: float
    directory: Path
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.verdict.ok

    @property
    def word(self) -> str:
        if self.error is not None:
            return "ERROR"
        return "ok" if self.verdict.ok else "VIOLATION"

    def line(self) -> str:
        """The progress line: seed, operations, faults, verdict."""
        return (
            f"seed {self.schedule.seed}: {len(self.schedule.keys)} ops, "
            f"{len(self.schedule.faults)} faults ({', '.join(self.schedule.kinds)}), "
            f"{self.word} in {self.seconds:.1f}s; {self.verdict.summary()}"
        )


@dataclass(frozen=True)
class Exploration:
    rounds: tuple[RoundResult, ...]
    seconds: float
    workdir: Path

    @property
    def failed(self) -> tuple[RoundResult, ...]:
        return tuple(result for result in self.rounds if not result.ok)

    @property
    def ok(self) -> bool:
        return not self.failed


def at_rest(status: str, safety: str, due: bool, lease_owner: str | None) -> bool:
    """Nothing will move this effect any more: settled, waiting for a person, or an
    unsafe unknown (nobody may resend it)."""
    if status in SETTLED:
        return True
    idle = not due and lease_owner is None
    if status == "manual_review":
        return idle
    return status == "outcome_unknown" and safety == "unsafe" and idle


async def read_ledger(dsn: str) -> dict[str, LedgerRow]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(EFFECTS, TENANT)
    finally:
        await conn.close()
    return {
        row["operation_key"]: LedgerRow(
            row["operation_key"],
            row["status"],
            row["safety"],
            row["receipt_status"],
            at_rest(row["status"], row["safety"], row["due"], row["lease_owner"]),
        )
        for row in rows
    }


async def settled_ledger(dsn: str) -> dict[str, LedgerRow]:
    """Poll until every effect is at rest; at the deadline, the ledger as it is (the
    oracle reports what is still moving)."""

    async def look() -> dict[str, LedgerRow] | None:
        try:
            rows = await read_ledger(dsn)
        except (OSError, asyncpg.PostgresError):
            return None
        return rows if all(row.at_rest for row in rows.values()) else None

    with suppress(CellError):
        return await poll(look, timeout=SETTLE_TIMEOUT, what="the ledger to come to rest")
    return await read_ledger(dsn)


def _sqlite_executions(db: Path) -> list[Execution]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT order_id, id, created_at FROM charges").fetchall()
    return [Execution(order, charge, float(created)) for order, charge, created in rows]


async def read_executions(db: Path, target_dsn: str | None) -> list[Execution]:
    """Every charge in the target's own tables (SQLite, and PostgreSQL if any)."""
    found = await asyncio.to_thread(_sqlite_executions, db)
    if target_dsn is not None:
        conn = await asyncpg.connect(target_dsn)
        try:
            with suppress(asyncpg.UndefinedTableError):
                rows = await conn.fetch(
                    "SELECT order_id, id, extract(epoch FROM created_at)::float8 AS at"
                    " FROM charges"
                )
                found += [Execution(r["order_id"], r["id"], r["at"]) for r in rows]
        finally:
            await conn.close()
    return found


async def run_round(
    matrix: Matrix, schedule: Schedule, directory: Path, postgres: OwnedPostgres | None
) -> RoundResult:
    started = time.monotonic()
    # A seed's directory from an earlier run would lend its logs (and their listening
    # lines) and its target table to this round: start from nothing.
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    answers: list[Answer] = []
    applied: list[str] = []
    error: str | None = None
    executions: list[Execution] = []
    rows: dict[str, LedgerRow] = {}
    target_dsn: str | None = None
    try:
        ledger_dsn = await matrix.fresh_database(
            "explore", f"s{schedule.seed}", template=matrix.template
        )
        if TRANSACTIONAL in schedule.keys.values():
            target_dsn = await matrix.fresh_database("explore", "target")
        async with AsyncExitStack() as stack:
            cluster = Cluster(
                stack, directory, ledger_dsn, matrix.master_key, matrix.kit_secret
            )
            await cluster.start_target(target_dsn)
            rows = await _explore(cluster, postgres, schedule, answers, applied)
    except Exception as exc:  # one broken round must not hide the others
        error = f"{type(exc).__name__}: {exc}"
    try:  # whatever happened, the target's table says what was executed
        executions = await read_executions(directory / TARGET_DB, target_dsn)
    except (OSError, sqlite3.Error, asyncpg.PostgresError) as exc:
        error = error or f"reading the target's table: {type(exc).__name__}: {exc}"
    verdict = judge(schedule.keys, answers, executions, rows)
    if error is not None:
        verdict.violations.append(f"the round could not run as designed: {error}")
    _write_log(directory, schedule, applied, answers, verdict)
    return RoundResult(
        schedule,
        verdict,
        tuple(applied),
        round(time.monotonic() - started, 1),
        directory,
        error,
    )


async def _explore(
    cluster: Cluster,
    postgres: OwnedPostgres | None,
    schedule: Schedule,
    answers: list[Answer],
    applied: list[str],
) -> dict[str, LedgerRow]:
    """Start the proxies, run agents and faults, heal, let the ledger settle (read
    directly, not through the relay: the oracle reads around the faults)."""
    send_pause = schedule.send_pause
    armed = [
        f"{failpoints.BEFORE_UPSTREAM_SEND}:{failpoints.STOP}:every={send_pause.count}"
        if send_pause is not None and send_pause.proxy == index
        else None
        for index in range(schedule.proxies)
    ]
    for arming in armed:  # one at a time: parallel starts only fight for two cores
        await cluster.add_slot(arming)
    agents = Agents([slot.url for slot in cluster.slots], answers, time.monotonic())
    player = FaultPlayer(cluster, postgres, schedule, agents.started, applied)
    watcher = asyncio.create_task(player.watch_send_pauses())
    asking = asyncio.create_task(agents.run(schedule.ops, schedule.agents))
    try:
        await player.play(asking)
        await asking
        if any(slot.dead for slot in cluster.slots):
            raise CellError("a killed proxy was not restarted before the ledger settled")
        return await settled_ledger(cluster.ledger_dsn)
    finally:
        asking.cancel()
        with suppress(asyncio.CancelledError):
            await asking
        await player.stop_watching(watcher)


def _write_log(
    directory: Path,
    schedule: Schedule,
    applied: Sequence[str],
    answers: Sequence[Answer],
    verdict: Verdict,
) -> None:
    lines = [f"seed {schedule.seed}", "schedule:", *schedule.describe(), "applied:"]
    lines += list(applied)
    lines += ["violations:", *verdict.violations, "warnings:", *verdict.warnings]
    lines += ["answers:"]
    lines += [
        f"{a.finished:.3f} {a.key} agent {a.agent} proxy {a.proxy}: {a.kind}"
        for a in answers
    ]
    (directory / "round.txt").write_text("\n".join(lines) + "\n")


def explore(
    server_dsn: str,
    workdir: Path,
    schedules: Callable[[int], Schedule],
    *,
    minutes: float | None,
    rounds: int | None,
    postgres: OwnedPostgres | None,
    progress: Callable[[str], None],
) -> Exploration:
    """Round after round (schedule ``schedules(n)`` for round n) until ``minutes``
    have passed or ``rounds`` are done, whichever comes first (None: no such bound);
    at least one round."""
    return asyncio.run(
        _rounds(server_dsn, workdir, schedules, minutes, rounds, postgres, progress)
    )


async def _rounds(
    server_dsn: str,
    workdir: Path,
    schedules: Callable[[int], Schedule],
    minutes: float | None,
    rounds: int | None,
    postgres: OwnedPostgres | None,
    progress: Callable[[str], None],
) -> Exploration:
    started = time.monotonic()
    deadline = started + minutes * 60 if minutes is not None else float("inf")
    results: list[RoundResult] = []
    matrix = Matrix(server_dsn, workdir, sabotage=None)
    async with matrix.prepared():
        while not results or (
            (rounds is None or len(results) < rounds) and time.monotonic() < deadline
        ):
            schedule = schedules(len(results))
            result = await run_round(
                matrix, schedule, workdir / f"seed-{schedule.seed}", postgres
            )
            results.append(result)
            progress(result.line())
    return Exploration(tuple(results), round(time.monotonic() - started, 1), workdir)
