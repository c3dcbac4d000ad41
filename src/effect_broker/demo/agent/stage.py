"""The demo's stage: a ledger database, the demo target and the real proxy process.

The pieces are the crash matrix's (``Cell``): the packaged payment target in its
idempotent mode and ``effect-broker serve``, each a process with its log in the work
folder. With ``kill_after_commit`` the first proxy is armed with the
``after_upstream_response`` failpoint: it dies (like SIGKILL, no cleanup) the moment the
target's answer reaches it, so the target has committed the charge and nobody has heard
about it. A watcher restarts the proxy on the same port; the tool, which knows nothing
of this, keeps retrying with the same operation key.
"""

from __future__ import annotations

import asyncio
import base64
import os
import secrets
import uuid
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from effect_broker import failpoints
from effect_broker.client import operation_key
from effect_broker.demo.agent.loop import AgentAnswer, run_conversation
from effect_broker.demo.agent.models import ChatModel
from effect_broker.demo.agent.transcript import Transcript
from effect_broker.demo.crash_matrix.agent import ORDER_ID
from effect_broker.demo.crash_matrix.cells import TENANT, Cell
from effect_broker.demo.crash_matrix.ledger import Ledger, LedgerReader
from effect_broker.demo.crash_matrix.matrix import with_database
from effect_broker.demo.crash_matrix.processes import CellError, Proxy
from effect_broker.store.migrations import apply_migrations

MODE = "idempotent"
REQUEST = f"Please charge {ORDER_ID} for 42.00 USD."
DEATH_TIMEOUT = 60.0  # the armed proxy meets its failpoint within this


@dataclass(frozen=True)
class DemoResult:
    """What the demo showed: the target's count is the ground truth."""

    charges: int
    answer: AgentAnswer
    proxy_killed: bool
    ledger_status: str | None
    transcript: Transcript

    @property
    def ok(self) -> bool:
        """One charge, and the agent's tool got a 2xx for it."""
        return (
            self.charges == 1
            and bool(self.answer.charges)
            and all(outcome.ok for outcome in self.answer.charges)
        )


async def run_demo(
    server_dsn: str,
    workdir: Path,
    model: ChatModel,
    transcript: Transcript,
    *,
    kill_after_commit: bool = False,
) -> DemoResult:
    """Run the whole demo on ``server_dsn`` (which must allow CREATE DATABASE)."""
    workdir.mkdir(parents=True, exist_ok=True)
    database = f"demo_agent_{uuid.uuid4().hex[:10]}"
    await _admin(server_dsn, f'CREATE DATABASE "{database}"')
    try:
        return await _run(
            with_database(server_dsn, database),
            workdir,
            model,
            transcript,
            kill_after_commit,
        )
    finally:
        await _admin(server_dsn, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


async def _run(
    database_url: str,
    workdir: Path,
    model: ChatModel,
    transcript: Transcript,
    kill_after_commit: bool,
) -> DemoResult:
    key = operation_key(ORDER_ID, "charge")
    async with AsyncExitStack() as stack:
        conn = await asyncpg.connect(database_url)
        stack.push_async_callback(conn.close)
        await apply_migrations(conn)
        cell = Cell(
            mode=MODE,
            scenario="agent",
            directory=workdir,
            database_url=database_url,
            master_key=base64.b64encode(os.urandom(32)).decode(),
            kit_secret=secrets.token_urlsafe(24),
            sabotage=None,
            stack=stack,
            reader=LedgerReader(conn, TENANT, key),
        )
        target = await cell.start_target()
        transcript.say("stage", f"payment target (idempotent mode) on {target.url}")
        armed = failpoints.AFTER_UPSTREAM_RESPONSE if kill_after_commit else None
        proxy = await cell.start_proxy(failpoint=armed)
        transcript.say(
            "stage",
            f"effect-broker proxy on {proxy.url}"
            + (f", armed to die at {armed}" if armed else ""),
        )
        killed = asyncio.Event()
        watcher = (
            asyncio.create_task(_restart_after_death(cell, proxy, transcript, killed))
            if kill_after_commit
            else None
        )
        try:
            answer = await run_conversation(
                model, REQUEST, f"{proxy.url}/{MODE}/v1/charges", transcript
            )
        finally:
            await model.close()
            if watcher is not None:
                watcher.cancel()
                with suppress(asyncio.CancelledError, CellError):
                    await watcher
        ledger = await _settled(cell)
        charges = await target.charges()
        transcript.say(
            "ledger",
            f"effect {key}: {ledger}" if ledger else f"no effect recorded for {key}",
        )
        transcript.say(
            "target",
            f"its own charges table holds {charges} charge(s) for {ORDER_ID}",
        )
        return DemoResult(charges, answer, killed.is_set(), ledger, transcript)


async def _restart_after_death(
    cell: Cell, proxy: Proxy, transcript: Transcript, killed: asyncio.Event
) -> None:
    code = await proxy.process.wait_exit(DEATH_TIMEOUT)
    killed.set()
    transcript.say(
        "stage",
        f"the proxy died (exit {code}) right after the target answered: the charge is "
        "committed there, and its answer never reached the agent",
    )
    await cell.restart(proxy)
    transcript.say("stage", "a new proxy process listens on the same port")


async def _settled(cell: Cell) -> str | None:
    ledger: Ledger | None
    try:
        ledger = await cell.settled_ledger()
    except CellError:
        ledger = await cell.ledger()
    return None if ledger is None else ledger.status


async def _admin(server_dsn: str, statement: str) -> None:
    conn = await asyncpg.connect(server_dsn)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()
