"""The whole matrix: a migrated template database, every cell on a clone of it.

Cells run a few at a time, each with its own ports, database and target, in an order
that mixes modes so slow and quick cells share the machine.
"""

from __future__ import annotations

import asyncio
import base64
import os
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from effect_broker.demo.crash_matrix.agent import OPERATION_KEY
from effect_broker.demo.crash_matrix.cells import TENANT, Cell
from effect_broker.demo.crash_matrix.ledger import LedgerReader
from effect_broker.demo.crash_matrix.scenarios import run_scenario
from effect_broker.demo.crash_matrix.verdicts import (
    BY,
    MODES,
    SCENARIOS,
    TRANSACTIONAL,
    CellResult,
    MatrixResult,
    Observation,
    applies,
    judge,
)
from effect_broker.store.migrations import apply_migrations

#: Makes one cell's ledger elsewhere (a migrated, distributed database on a cluster)
#: and returns its URL; without one, each cell's ledger is a clone of the template.
LedgerMaker = Callable[[], Awaitable[str]]

SABOTAGE_ENV = "CRASH_MATRIX_SABOTAGE"
SABOTAGES = ("fresh-downstream-key",)


# --------------------------------------------------------------------------- the matrix


def with_database(dsn: str, database: str) -> str:
    """The same server DSN pointing at another database."""
    return urlunsplit(urlsplit(dsn)._replace(path="/" + database))


@dataclass
class Matrix:
    """What all cells share: the server, a migrated template database, the master key."""

    server_dsn: str
    workdir: Path
    sabotage: str | None
    master_key: str = field(
        default_factory=lambda: base64.b64encode(os.urandom(32)).decode()
    )
    kit_secret: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    make_ledger: LedgerMaker | None = None
    template: str = field(default_factory=lambda: f"crash_tmpl_{uuid.uuid4().hex[:10]}")
    databases: list[str] = field(default_factory=list)
    create_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def _admin(self, *statements: str) -> None:
        conn = await asyncpg.connect(self.server_dsn)
        try:
            for statement in statements:
                await conn.execute(statement)
        finally:
            await conn.close()

    @asynccontextmanager
    async def prepared(self) -> AsyncIterator[Matrix]:
        """Migrate the template once; drop it and every cell database at the end."""
        await self._admin(f'CREATE DATABASE "{self.template}"')
        try:
            conn = await asyncpg.connect(with_database(self.server_dsn, self.template))
            try:
                await apply_migrations(conn)
            finally:
                await conn.close()
            yield self
        finally:
            await self._admin(
                *(
                    f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'
                    for name in [*self.databases, self.template]
                )
            )

    async def fresh_database(
        self, mode: str, scenario: str, *, template: str | None = None
    ) -> str:
        """A new database for one cell: a clone of the migrated ledger ``template``,
        or, without one, an empty database (a transactional target's own)."""
        name = f"crash_{mode}_{scenario.replace('-', '_')}_{uuid.uuid4().hex[:6]}"
        clone = f' TEMPLATE "{template}"' if template else ""
        async with self.create_lock:  # concurrent clones of one template may collide
            await self._admin(f'CREATE DATABASE "{name}"{clone}')
        self.databases.append(name)
        return with_database(self.server_dsn, name)

    async def run_cell(self, mode: str, scenario: str) -> CellResult:
        started = time.monotonic()
        directory = self.workdir / f"{mode}-{scenario}"
        directory.mkdir(parents=True, exist_ok=True)
        seen: Observation | None = None
        try:
            database_url = (
                await self.make_ledger()
                if self.make_ledger is not None
                else await self.fresh_database(mode, scenario, template=self.template)
            )
            target_database_url = None
            if mode == TRANSACTIONAL:
                target_database_url = await self.fresh_database(mode, "target")
            async with AsyncExitStack() as stack:
                conn = await asyncpg.connect(database_url)
                stack.push_async_callback(conn.close)
                cell = Cell(
                    mode=mode,
                    scenario=scenario,
                    directory=directory,
                    database_url=database_url,
                    master_key=self.master_key,
                    kit_secret=self.kit_secret,
                    sabotage=self.sabotage,
                    stack=stack,
                    reader=LedgerReader(conn, TENANT, OPERATION_KEY),
                    target_database_url=target_database_url,
                )
                # Runs after every process of the cell has stopped (the stack is LIFO).
                stack.push_async_callback(cell.write_history)
                seen = await run_scenario(cell)
            verdict, problems = judge(seen)
        except Exception as exc:  # one broken cell must not hide the other results
            verdict, problems = "ERROR", [f"{type(exc).__name__}: {exc}"]
        return CellResult(
            mode,
            scenario,
            round(time.monotonic() - started, 2),
            verdict,
            tuple(problems),
            seen,
            directory,
        )


def run_matrix(
    server_dsn: str,
    workdir: Path,
    *,
    progress: Callable[[str], None],
    modes: Sequence[str] = MODES,
    scenarios: Sequence[str] = SCENARIOS,
    parallel: int = 3,
    sabotage: str | None = None,
    make_ledger: LedgerMaker | None = None,
) -> MatrixResult:
    """Run every (mode, scenario) cell; ``server_dsn`` must allow CREATE DATABASE.
    ``make_ledger`` puts each cell's ledger elsewhere (its caller drops them).

    Cells run ``parallel`` at a time (each has its own ports, database and target), in
    an order that mixes modes so slow and quick cells share the machine.
    """
    sabotage = sabotage or os.environ.get(SABOTAGE_ENV) or None
    if sabotage is not None and sabotage not in SABOTAGES:
        raise ValueError(f"unknown sabotage {sabotage!r}; known: {', '.join(SABOTAGES)}")
    return asyncio.run(
        _run_matrix(
            Matrix(server_dsn, workdir, sabotage, make_ledger=make_ledger),
            progress,
            modes,
            scenarios,
            parallel,
        )
    )


async def _run_matrix(
    matrix: Matrix,
    progress: Callable[[str], None],
    modes: Sequence[str],
    scenarios: Sequence[str],
    parallel: int,
) -> MatrixResult:
    started = time.monotonic()
    order = [
        (mode, scenario)
        for scenario in scenarios
        for mode in modes
        if applies(mode, scenario)
    ]
    results: dict[tuple[str, str], CellResult] = {}
    pending = iter(order)

    async def worker() -> None:
        for mode, scenario in pending:  # shared: each cell goes to one worker
            result = await matrix.run_cell(mode, scenario)
            results[mode, scenario] = result
            progress(
                f"[{len(results)}/{len(order)}] {mode}{BY}{scenario} ... "
                f"{_progress_word(result)} ({result.seconds:.1f}s)"
            )

    async with matrix.prepared():
        await asyncio.gather(*(worker() for _ in range(max(1, parallel))))
    cells = tuple(
        results[mode, scenario]
        for mode in modes
        for scenario in scenarios
        if applies(mode, scenario)
    )
    return MatrixResult(cells, round(time.monotonic() - started, 1), matrix.workdir)


def _progress_word(result: CellResult) -> str:
    if not result.ok:
        return "VIOLATION: " + "; ".join(result.violations)
    return "duplicate, as expected without a proxy" if result.expected_duplicate else "ok"
