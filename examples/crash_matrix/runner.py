"""The crash matrix: real processes, killed at every point that matters, counted.

A local journal cannot tell "the request never arrived" from "the target committed and
the answer was lost". This runner shows what effect-broker does about that, with nothing
simulated: for every safety class (the demo payment target's ``idempotent``,
``reconcilable`` and ``unsafe`` modes) and every scenario below, it starts a fresh
target process (its own SQLite file), a fresh ledger database and the real proxy
process (the ``effect-broker serve`` command, configured by environment), breaks
something, lets the scripted agent retry with the same ``Operation-Key``, waits until
the ledger has settled as far as the proof allows, and then counts the rows in the
*target's own* ``charges`` table. That count is the ground truth.

Scenarios:

* the failpoints (``before_reserve_commit`` ... ``after_receipt_commit``, and
  ``in_reserve_batch`` / ``in_receipt_batch`` inside a group commit, after the batch's
  statement committed and before any of its requests is answered): the proxy is
  started with ``EFFECT_BROKER_FAILPOINTS`` set and kills itself there (exit 86, no
  cleanup, like SIGKILL); it is restarted unarmed on the same ports and the agent's
  retry goes to the new process;
* ``sigkill-in-flight``: the target commits and never answers; once its table shows the
  row the proxy gets SIGKILL. The classic "target committed, response lost";
* ``10-concurrent``: ten agents at once with the same key and no failure at all;
* ``zombie``: as above, but the proxy is frozen (SIGSTOP) instead of killed; a second
  proxy takes the effect over once the first one's lease is past and settles it; then the
  first wakes up (SIGCONT) and its late write must be fenced (refused by version);
* ``naive``: no proxy. The agent's naive mode (fresh key per attempt, 1 s timeout)
  against a target that withholds one answer: the double charge this project exists for.

Verdict rules (``judge``), where any broken rule is a violation and the exit status 1:

* idempotent and reconcilable: exactly one charge in every proxy scenario, the effect
  ``succeeded`` with a receipt, and the agent got a 2xx;
* unsafe: never more than one charge. Where the outcome is ambiguous (the request may
  have reached the target: ``before_upstream_send``, ``after_upstream_response``,
  ``sigkill-in-flight``, ``zombie``) the effect must end ``outcome_unknown`` and the agent
  must have been told so; elsewhere the proxy knows nothing was sent, so one charge;
* a scenario whose receipt was committed before the crash (``after_receipt_commit``)
  must replay that receipt; ten concurrent agents get one answer, replayed to nine;
* zombie: the frozen proxy's late write was fenced (its
  ``effect_broker_fenced_writes_total`` > 0) and the ledger stays as the second proxy
  left it;
* naive: two or more charges is the expected, demonstrated failure ("duplicate
  (expected: no proxy)"). A naive run *without* a duplicate is the violation: the demo
  would prove nothing.

Routes come from ``routes.yaml`` next to this file, a valid routes file for a target on
port 9000; each cell gets a copy whose upstream origins point at its own target.

Run it (starts an embedded PostgreSQL unless ``--database-url`` names a server on which
it may create and drop databases)::

    python examples/crash_matrix/runner.py
    effect-broker demo crash-matrix          # the same, from the CLI

``CRASH_MATRIX_SABOTAGE=fresh-downstream-key`` (or ``--sabotage``) starts every proxy
with its stable downstream key replaced by a random one per attempt, patched in at
process start without touching ``src/``: a deliberately broken proxy, to show that the
matrix turns red when the promise is broken.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import importlib.util
import os
import re
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg
import yaml
from rich.console import Console
from rich.table import Table

from effect_broker import failpoints
from effect_broker.store.migrations import apply_migrations

HERE = Path(__file__).resolve().parent
ROUTES_TEMPLATE = HERE / "routes.yaml"
TARGET_SCRIPT = HERE.parent / "payment_target.py"


def _load_agent() -> ModuleType:
    """The sibling agent.py; examples/ is not a package, so import it by path."""
    name = "crash_matrix_agent"
    if (loaded := sys.modules.get(name)) is not None:
        return loaded
    spec = importlib.util.spec_from_file_location(name, HERE / "agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while decorating
    spec.loader.exec_module(module)
    return module


agent = _load_agent()

MODES = ("idempotent", "reconcilable", "unsafe")
SIGKILL_IN_FLIGHT = "sigkill-in-flight"
CONCURRENT = "10-concurrent"
ZOMBIE = "zombie"
NAIVE = "naive"
SCENARIOS = (*failpoints.ALL, SIGKILL_IN_FLIGHT, CONCURRENT, ZOMBIE, NAIVE)
#: Scenarios where the request may or may not have reached the target when the proxy
#: lost track of it. An unsafe target cannot say which, so the answer must be "unknown".
AMBIGUOUS = frozenset(
    {
        failpoints.BEFORE_UPSTREAM_SEND,
        failpoints.AFTER_UPSTREAM_RESPONSE,
        SIGKILL_IN_FLIGHT,
        ZOMBIE,
    }
)
CONCURRENT_AGENTS = 10

TENANT = "crash-matrix"
LEASE_GRACE = "300ms"  # lease = contract timeout (1 s) + this; then the holder is dead
SETTLEMENT_DELAY = 0.3  # the target's lookup lags commits this much (bound: 500 ms)
SABOTAGE_ENV = "CRASH_MATRIX_SABOTAGE"
SABOTAGES = ("fresh-downstream-key",)

POLL = 0.05  # seconds between looks while polling with a deadline
START_TIMEOUT = 30.0  # a process prints its "listening" line within this
DEATH_TIMEOUT = 20.0  # an armed proxy reaches its failpoint within this
SETTLE_TIMEOUT = 30.0  # the ledger settles (or provably stops moving) within this
AGENT_DEADLINE = 40.0  # an agent stops asking after this
STOP_GRACE = 5.0  # SIGTERM, then SIGKILL after this
BY = " \u00d7 "  # mode x scenario, as the progress lines print it

PROXY_BANNER = re.compile(r"effect-broker proxy on (http://\S+), admin on (http://\S+?),")
TARGET_BANNER = re.compile(r"payment target listening on (http://\S+)")
FENCED_METRIC = re.compile(r"^effect_broker_fenced_writes_total (\S+)$", re.MULTILINE)

#: ``effect-broker serve``: the serve command itself, run on its own so that the matrix
#: does not depend on every other command group of the CLI importing cleanly.
SERVE = "import typer; from effect_broker.cli.serve import serve; typer.run(serve)"
#: The same, with every dispatch given a random downstream key instead of the stable
#: derived one. The engine is the only caller of ``outgoing_request``; it imports it by
#: name, so the name is replaced there before the server starts.
SERVE_SABOTAGED = """
import secrets
import typer
import effect_broker.engine.engine as engine
from effect_broker.cli.serve import serve
original = engine.outgoing_request
def fresh_key(route, stored, downstream_key, injected):
    return original(route, stored, secrets.token_urlsafe(32), injected)
engine.outgoing_request = fresh_key
typer.run(serve)
"""

T = TypeVar("T")


class CellError(Exception):
    """A cell could not be run as designed (a process would not start, a deadline)."""


# --------------------------------------------------------------------------- results


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


@dataclass(frozen=True)
class Observation:
    """Everything a cell saw, before any judgement."""

    mode: str
    scenario: str
    charges: int
    ledger: Ledger | None
    agents: tuple[Any, ...]  # agent.AgentResult, one per agent
    fenced: float | None = None  # zombie: the first proxy's fenced-writes counter
    taken_over: bool | None = None  # zombie: the second proxy claimed and settled it
    second_proxy_kept_it: bool | None = None  # zombie: the woken one wrote nothing


@dataclass(frozen=True)
class CellResult:
    mode: str
    scenario: str
    seconds: float
    verdict: str
    violations: tuple[str, ...]
    observation: Observation | None
    logs: Path

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def expected_duplicate(self) -> bool:
        return self.ok and self.scenario == NAIVE


@dataclass(frozen=True)
class MatrixResult:
    cells: tuple[CellResult, ...]
    seconds: float
    workdir: Path

    @property
    def violations(self) -> list[str]:
        return [
            f"{cell.mode}{BY}{cell.scenario}: {violation}"
            for cell in self.cells
            for violation in cell.violations
        ]

    @property
    def ok(self) -> bool:
        return not self.violations


# --------------------------------------------------------------------------- verdicts


def judge(seen: Observation) -> tuple[str, list[str]]:
    """The verdict for one cell and every rule it breaks (empty: it passes)."""
    if seen.scenario == NAIVE:
        if seen.charges >= 2:
            return "duplicate (expected: no proxy)", []
        return "no duplicate: proves nothing", [
            f"the naive client left {seen.charges} charge(s); without the double "
            "charge the demo shows nothing"
        ]
    problems: list[str] = []
    ledger = seen.ledger
    status = ledger.status if ledger else "no effect"
    ambiguous_unsafe = seen.mode == "unsafe" and seen.scenario in AMBIGUOUS
    if ambiguous_unsafe:
        if seen.charges > 1:
            problems.append(f"{seen.charges} charges: the proxy made a duplicate")
        if status != "outcome_unknown":
            problems.append(f"effect is {status}, expected a visible outcome_unknown")
        if any(result.outcome != "outcome_unknown" for result in seen.agents):
            problems.append("the agent was not told the outcome is unknown")
        verdict = f"no duplicate ({_charges(seen.charges)}), outcome_unknown shown"
    else:
        if seen.charges != 1:
            problems.append(f"{seen.charges} charges, expected exactly 1")
        if status != "succeeded" or ledger is None or ledger.receipt_source is None:
            problems.append(f"effect is {status}, expected succeeded with a receipt")
        if not all(result.final_2xx for result in seen.agents):
            problems.append("an agent did not get a 2xx answer")
        verdict = "exactly one charge"
    if seen.scenario in (failpoints.AFTER_RECEIPT_COMMIT, failpoints.IN_RECEIPT_BATCH):
        if not all(result.replayed for result in seen.agents):
            problems.append("the receipt committed before the crash was not replayed")
        verdict += ", receipt replayed"
    if seen.scenario == CONCURRENT:
        problems += _concurrent_problems(seen.agents)
        verdict += f", {len(seen.agents)} agents one answer"
    if seen.scenario == ZOMBIE:
        if not seen.fenced:
            problems.append("the frozen proxy's late write was not fenced")
        if not seen.taken_over:
            problems.append("the second proxy did not take the effect over")
        if not seen.second_proxy_kept_it:
            problems.append("the woken proxy wrote to the ledger after the takeover")
        verdict += f", zombie fenced ({seen.fenced or 0:g})"
    return verdict, problems


def _charges(n: int) -> str:
    return f"{n} charge" if n == 1 else f"{n} charges"


def _concurrent_problems(results: Sequence[Any]) -> list[str]:
    problems = []
    bodies = {result.body for result in results}
    fresh = [result for result in results if not result.replayed]
    if len(bodies) != 1:
        problems.append(f"{len(bodies)} different answers to one intent")
    if len(fresh) > 1:
        problems.append(f"{len(fresh)} agents got a fresh (non-replayed) answer")
    return problems


# --------------------------------------------------------------------------- processes


@dataclass
class Process:
    """A child process whose output goes to a log file, stopped on the way out."""

    name: str
    proc: asyncio.subprocess.Process
    log: Path
    frozen: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    async def wait_for_line(self, pattern: re.Pattern[str]) -> re.Match[str]:
        """The first log match of ``pattern``: how a child says it is listening."""

        async def look() -> re.Match[str] | None:
            if match := pattern.search(self.output()):
                return match
            if self.proc.returncode is not None:
                raise CellError(
                    f"{self.name} exited ({self.proc.returncode}) before it was "
                    f"ready:\n{self.tail()}"
                )
            return None

        return await poll(look, timeout=START_TIMEOUT, what=f"{self.name} to start")

    async def wait_exit(self, timeout: float) -> int:
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            raise CellError(f"{self.name} still running after {timeout:g}s") from None

    def signal(self, signum: signal.Signals) -> None:
        self.proc.send_signal(signum)
        if signum is signal.SIGSTOP:
            self.frozen = True
        elif signum is signal.SIGCONT:
            self.frozen = False

    async def stop(self) -> None:
        """SIGTERM (after SIGCONT if frozen), SIGKILL if it lingers; always reaped."""
        if self.proc.returncode is None:
            with suppress(ProcessLookupError):
                if self.frozen:
                    self.signal(signal.SIGCONT)
                self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), STOP_GRACE)
            except TimeoutError:
                with suppress(ProcessLookupError):
                    self.proc.kill()
        await self.proc.wait()


async def spawn(
    stack: AsyncExitStack, name: str, argv: Sequence[str], log: Path, env: dict[str, str]
) -> Process:
    """Start ``argv`` with stdout and stderr in ``log``; stopped when ``stack`` closes."""
    with log.open("ab") as sink:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=sink, stderr=sink, env=env
        )
    process = Process(name, proc, log)
    stack.push_async_callback(process.stop)
    return process


async def poll(
    look: Callable[[], Awaitable[T | None]], *, timeout: float, what: str
) -> T:
    """Call ``look`` until it returns something other than None; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        found = await look()
        if found is not None:
            return found
        if time.monotonic() >= deadline:
            raise CellError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(POLL)


# --------------------------------------------------------------------------- the pieces


@dataclass
class Target:
    """The demo payment target of one cell; its SQLite table is the ground truth."""

    url: str
    db: Path
    process: Process

    async def charges(self) -> int:
        def count() -> int:
            with sqlite3.connect(self.db) as conn:
                (n,) = conn.execute(
                    "SELECT count(*) FROM charges WHERE order_id = ?", (agent.ORDER_ID,)
                ).fetchone()
            return int(n)

        return await asyncio.to_thread(count)

    async def withhold_next_answer(self) -> None:
        """Arm ``hang_after_commit``: the next charge commits and is never answered."""
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{self.url}/_faults", json={"hang_after_commit": 1}) as answer,
        ):
            answer.raise_for_status()

    async def wait_for_charge(self) -> None:
        async def committed() -> bool | None:
            return True if await self.charges() >= 1 else None

        await poll(committed, timeout=START_TIMEOUT, what="the target to commit")


@dataclass
class Proxy:
    url: str
    admin_url: str
    process: Process

    @property
    def listen(self) -> str:
        return urlsplit(self.url).netloc

    @property
    def admin_listen(self) -> str:
        return urlsplit(self.admin_url).netloc

    def actor_pattern(self) -> str:
        """SQL LIKE pattern for this process's lease owners (role@host:PID:suffix)."""
        return f"%:{self.process.pid}:%"

    async def fenced_writes(self) -> float:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{self.admin_url}/metrics") as answer,
        ):
            text = await answer.text()
        match = FENCED_METRIC.search(text)
        return float(match.group(1)) if match else 0.0


LEDGER_ROW = """
SELECT e.effect_id, e.status, e.attempts, e.version, e.due_at IS NOT NULL AS due,
       e.lease_owner, r.source AS receipt_source,
       (SELECT actor FROM effect_events v WHERE v.effect_id = e.effect_id
        ORDER BY seq DESC LIMIT 1) AS last_actor
FROM effects e LEFT JOIN effect_receipts r USING (effect_id)
WHERE e.tenant_id = $1 AND e.operation_key = $2
"""
CLAIMED_BY = """
SELECT EXISTS (
    SELECT 1 FROM effects e JOIN effect_events v USING (effect_id)
    WHERE e.tenant_id = $1 AND e.operation_key = $2
      AND v.kind = 'claimed' AND v.actor LIKE $3)
"""
#: Events the first proxy ($3) wrote after the second ($4) first claimed the effect. A
#: fenced write changes nothing and writes no event, so this must be 0.
WRITES_AFTER_TAKEOVER = """
SELECT count(*) FROM effects e JOIN effect_events v USING (effect_id)
WHERE e.tenant_id = $1 AND e.operation_key = $2 AND v.actor LIKE $3
  AND v.seq > (SELECT min(w.seq) FROM effect_events w
               WHERE w.effect_id = e.effect_id AND w.kind = 'claimed' AND w.actor LIKE $4)
"""
HISTORY = """
SELECT v.seq, v.occurred_at, v.kind, v.from_status, v.to_status, v.actor, v.details
FROM effects e JOIN effect_events v USING (effect_id)
WHERE e.tenant_id = $1 AND e.operation_key = $2
ORDER BY v.seq
"""


@dataclass
class Cell:
    """One mode and scenario: its directory, database, processes and observations."""

    mode: str
    scenario: str
    directory: Path
    database_url: str
    master_key: str
    sabotage: str | None
    stack: AsyncExitStack
    ledger_conn: asyncpg.Connection
    proxies: int = 0
    routes: Path | None = None

    async def start_target(self) -> Target:
        db = self.directory / "target.sqlite3"
        process = await spawn(
            self.stack,
            "payment target",
            [
                sys.executable,
                str(TARGET_SCRIPT),
                "--port",
                "0",
                "--db",
                str(db),
                "--settlement-delay",
                str(SETTLEMENT_DELAY),
                "--key-retention",
                "86400",
            ],
            self.directory / "target.log",
            dict(os.environ),
        )
        url = (await process.wait_for_line(TARGET_BANNER)).group(1)
        self.routes = write_routes(self.directory / "routes.yaml", url)
        return Target(url, db, process)

    async def start_proxy(
        self,
        *,
        failpoint: str | None = None,
        listen: str = "127.0.0.1:0",
        admin_listen: str = "127.0.0.1:0",
    ) -> Proxy:
        """``effect-broker serve`` on this cell's ledger, armed at ``failpoint``."""
        assert self.routes is not None, "start the target first"
        self.proxies += 1
        env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECT_BROKER_")}
        env.update(
            EFFECT_BROKER_DATABASE_URL=self.database_url,
            EFFECT_BROKER_MASTER_KEY=self.master_key,
            EFFECT_BROKER_ROUTES=str(self.routes),
            EFFECT_BROKER_LISTEN=listen,
            EFFECT_BROKER_ADMIN_LISTEN=admin_listen,
            EFFECT_BROKER_TENANT=TENANT,
            EFFECT_BROKER_LEASE_GRACE=LEASE_GRACE,
            EFFECT_BROKER_RECONCILER="true",
            EFFECT_BROKER_POOL_MAX_SIZE="4",
        )
        if failpoint:
            env["EFFECT_BROKER_FAILPOINTS"] = failpoint
        boot = SERVE_SABOTAGED if self.sabotage else SERVE
        name = f"proxy {self.proxies}" + (f" (armed: {failpoint})" if failpoint else "")
        process = await spawn(
            self.stack,
            name,
            [sys.executable, "-c", boot],
            self.directory / f"proxy-{self.proxies}.log",
            env,
        )
        match = await process.wait_for_line(PROXY_BANNER)
        return Proxy(match.group(1), match.group(2), process)

    async def restart(self, dead: Proxy) -> Proxy:
        """A new, unarmed proxy on the dead one's ports: the agent's URL stays valid."""
        return await self.start_proxy(listen=dead.listen, admin_listen=dead.admin_listen)

    async def ledger(self) -> Ledger | None:
        row = await self.ledger_conn.fetchrow(LEDGER_ROW, TENANT, agent.OPERATION_KEY)
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
        )

    async def settled_ledger(self) -> Ledger:
        """Poll until the effect is settled, or provably stays where it is."""

        async def look() -> Ledger | None:
            ledger = await self.ledger()
            return ledger if ledger is not None and ledger.at_rest(self.mode) else None

        return await poll(look, timeout=SETTLE_TIMEOUT, what="the ledger to settle")

    async def writes_after_takeover(self, *, zombie: Proxy, successor: Proxy) -> int:
        count: int = await self.ledger_conn.fetchval(
            WRITES_AFTER_TAKEOVER,
            TENANT,
            agent.OPERATION_KEY,
            zombie.actor_pattern(),
            successor.actor_pattern(),
        )
        return count

    async def write_history(self) -> None:
        """The effect's event history, next to the process logs, for whoever debugs."""
        rows = await self.ledger_conn.fetch(HISTORY, TENANT, agent.OPERATION_KEY)
        lines = [
            f"{row['seq']:>3} {row['occurred_at']:%H:%M:%S.%f} {row['kind']:<16} "
            f"{row['from_status'] or '-'} -> {row['to_status']}  by {row['actor']}  "
            f"{row['details']}"
            for row in rows
        ]
        (self.directory / "ledger-events.txt").write_text("\n".join(lines) + "\n")

    async def claimed_by(self, proxy: Proxy) -> bool:
        found: bool = await self.ledger_conn.fetchval(
            CLAIMED_BY, TENANT, agent.OPERATION_KEY, proxy.actor_pattern()
        )
        return found

    def run_agent(self, url: str, *, naive: bool = False) -> Coroutine[Any, Any, Any]:
        """The scripted agent for this cell's mode (an ``agent.AgentResult``)."""
        running: Coroutine[Any, Any, Any] = agent.run_agent(
            url, self.mode, naive=naive, deadline=AGENT_DEADLINE
        )
        return running


def write_routes(path: Path, target_url: str) -> Path:
    """routes.yaml with every upstream's origin replaced by this cell's target."""
    document = yaml.safe_load(ROUTES_TEMPLATE.read_text())
    for route in document["routes"]:
        upstream = urlsplit(route["upstream"])
        target = urlsplit(target_url)
        route["upstream"] = urlunsplit(upstream._replace(netloc=target.netloc))
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


# --------------------------------------------------------------------------- scenarios


async def crash_at_failpoint(cell: Cell, name: str) -> Observation:
    """The proxy kills itself at ``name`` during the agent's first attempt."""
    target = await cell.start_target()
    armed = await cell.start_proxy(failpoint=name)
    async with asking(cell.run_agent(armed.url)) as result:
        code = await armed.process.wait_exit(DEATH_TIMEOUT)
        if code != failpoints.EXIT_CODE:
            raise CellError(f"the armed proxy exited {code}, not {failpoints.EXIT_CODE}")
        await cell.restart(armed)
    return await observe(cell, target, [await result])


async def sigkill_in_flight(cell: Cell) -> Observation:
    """The target committed; the proxy is SIGKILLed before its answer (or receipt)."""
    target = await cell.start_target()
    await target.withhold_next_answer()
    proxy = await cell.start_proxy()
    async with asking(cell.run_agent(proxy.url)) as result:
        await target.wait_for_charge()
        proxy.process.signal(signal.SIGKILL)
        await proxy.process.wait_exit(DEATH_TIMEOUT)
        await cell.restart(proxy)
    return await observe(cell, target, [await result])


async def concurrent(cell: Cell) -> Observation:
    """Ten agents, one intent, no failure: one dispatch, nine joins or replays."""
    target = await cell.start_target()
    proxy = await cell.start_proxy()
    results = await asyncio.gather(
        *(cell.run_agent(proxy.url) for _ in range(CONCURRENT_AGENTS))
    )
    return await observe(cell, target, results)


async def zombie(cell: Cell) -> Observation:
    """A frozen proxy outlives its lease; its late write, on waking, must be refused."""
    target = await cell.start_target()
    await target.withhold_next_answer()
    first = await cell.start_proxy()
    async with asking(cell.run_agent(first.url)) as result:
        await target.wait_for_charge()
        first.process.signal(signal.SIGSTOP)
        second = await cell.start_proxy()

        async def taken_over() -> Ledger | None:
            ledger = await cell.ledger()
            if ledger is None or not ledger.at_rest(cell.mode):
                return None
            return ledger if await cell.claimed_by(second) else None

        await poll(taken_over, timeout=SETTLE_TIMEOUT, what="the second proxy's takeover")
        first.process.signal(signal.SIGCONT)

        async def fenced() -> float | None:
            count = await first.fenced_writes()
            return count if count > 0 else None

        fenced_writes = await poll(
            fenced, timeout=SETTLE_TIMEOUT, what="the woken proxy's fenced write"
        )
    seen = await observe(cell, target, [await result], fenced=fenced_writes)
    late_writes = await cell.writes_after_takeover(zombie=first, successor=second)
    last_actor = seen.ledger.last_actor if seen.ledger else ""
    return replace(
        seen,
        taken_over=True,
        second_proxy_kept_it=late_writes == 0 and f":{second.process.pid}:" in last_actor,
    )


async def naive(cell: Cell) -> Observation:
    """No proxy: a fresh key per attempt and a 1 s timeout against a late answer."""
    target = await cell.start_target()
    await target.withhold_next_answer()
    result = await cell.run_agent(target.url, naive=True)
    return Observation(cell.mode, cell.scenario, await target.charges(), None, (result,))


@asynccontextmanager
async def asking(agent_run: Coroutine[Any, Any, T]) -> AsyncIterator[asyncio.Task[T]]:
    """Run an agent in the background while the block breaks things around it.

    If the block fails, the agent is cancelled and awaited, so no request outlives it.
    """
    task = asyncio.create_task(agent_run)
    try:
        yield task
    except BaseException:
        task.cancel()
        with suppress(asyncio.CancelledError, Exception):
            await task
        raise


async def observe(
    cell: Cell, target: Target, agents: Sequence[Any], *, fenced: float | None = None
) -> Observation:
    """Wait for the ledger to settle, *then* count the target's charges.

    Counting first could miss a redispatch still to come; once the effect is settled
    (or provably waits for a person) nothing more will be sent for it.
    """
    ledger: Ledger | None
    try:
        ledger = await cell.settled_ledger()
    except CellError:
        ledger = await cell.ledger()  # judged as it is: unsettled fails the rules
    return Observation(
        cell.mode,
        cell.scenario,
        await target.charges(),
        ledger,
        tuple(agents),
        fenced=fenced,
    )


async def run_scenario(cell: Cell) -> Observation:
    if cell.scenario in failpoints.ALL:
        return await crash_at_failpoint(cell, cell.scenario)
    scenarios: dict[str, Callable[[Cell], Awaitable[Observation]]] = {
        SIGKILL_IN_FLIGHT: sigkill_in_flight,
        CONCURRENT: concurrent,
        ZOMBIE: zombie,
        NAIVE: naive,
    }
    return await scenarios[cell.scenario](cell)


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

    async def fresh_database(self, mode: str, scenario: str) -> str:
        name = f"crash_{mode}_{scenario.replace('-', '_')}_{uuid.uuid4().hex[:6]}"
        async with self.create_lock:  # concurrent clones of one template may collide
            await self._admin(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        self.databases.append(name)
        return with_database(self.server_dsn, name)

    async def run_cell(self, mode: str, scenario: str) -> CellResult:
        started = time.monotonic()
        directory = self.workdir / f"{mode}-{scenario}"
        directory.mkdir(parents=True, exist_ok=True)
        seen: Observation | None = None
        try:
            database_url = await self.fresh_database(mode, scenario)
            async with AsyncExitStack() as stack:
                conn = await asyncpg.connect(database_url)
                stack.push_async_callback(conn.close)
                cell = Cell(
                    mode=mode,
                    scenario=scenario,
                    directory=directory,
                    database_url=database_url,
                    master_key=self.master_key,
                    sabotage=self.sabotage,
                    stack=stack,
                    ledger_conn=conn,
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
) -> MatrixResult:
    """Run every (mode, scenario) cell; ``server_dsn`` must allow CREATE DATABASE.

    Cells run ``parallel`` at a time (each has its own ports, database and target), in
    an order that mixes modes so slow and quick cells share the machine.
    """
    sabotage = sabotage or os.environ.get(SABOTAGE_ENV) or None
    if sabotage is not None and sabotage not in SABOTAGES:
        raise ValueError(f"unknown sabotage {sabotage!r}; known: {', '.join(SABOTAGES)}")
    return asyncio.run(
        _run_matrix(server_dsn, workdir, progress, modes, scenarios, parallel, sabotage)
    )


async def _run_matrix(
    server_dsn: str,
    workdir: Path,
    progress: Callable[[str], None],
    modes: Sequence[str],
    scenarios: Sequence[str],
    parallel: int,
    sabotage: str | None,
) -> MatrixResult:
    started = time.monotonic()
    order = [(mode, scenario) for scenario in scenarios for mode in modes]
    results: dict[tuple[str, str], CellResult] = {}
    pending = iter(order)
    matrix = Matrix(server_dsn, workdir, sabotage)

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
    cells = tuple(results[mode, scenario] for mode in modes for scenario in scenarios)
    return MatrixResult(cells, round(time.monotonic() - started, 1), workdir)


def _progress_word(result: CellResult) -> str:
    if not result.ok:
        return "VIOLATION: " + "; ".join(result.violations)
    return "duplicate, as expected without a proxy" if result.expected_duplicate else "ok"


# --------------------------------------------------------------------------- report


def render(result: MatrixResult) -> Table:
    """(mode, scenario) -> target charges, effect status, receipt, agent, verdict.

    "sent" is how many dispatch attempts the ledger recorded: more than one with a
    single charge is the proof doing its work (a redispatch the target deduplicated).
    """
    title = f"crash matrix: {len(result.cells)} cells in {result.seconds:.0f}s, " + (
        "no violation" if result.ok else f"{len(result.violations)} VIOLATION(S)"
    )
    table = Table(title=title, title_justify="left")
    columns = ("mode", "scenario", "charges", "effect status", "sent", "receipt")
    for column in columns:
        numeric = column in ("charges", "sent")
        table.add_column(column, justify="right" if numeric else "left", no_wrap=True)
    table.add_column("agent finally saw")
    table.add_column("verdict", min_width=30)
    cells = result.cells
    for index, cell in enumerate(cells):
        seen = cell.observation
        ledger = seen.ledger if seen else None
        first_of_mode = index == 0 or cells[index - 1].mode != cell.mode
        last_of_mode = index + 1 < len(cells) and cells[index + 1].mode != cell.mode
        table.add_row(
            cell.mode if first_of_mode else "",
            cell.scenario,
            str(seen.charges) if seen else "?",
            ledger.status if ledger else ("-" if cell.scenario == NAIVE else "?"),
            f"{ledger.attempts}x" if ledger else "-",
            _receipt(cell),
            _agents(seen),
            _verdict(cell),
            end_section=last_of_mode,
        )
    return table


def _receipt(cell: CellResult) -> str:
    if cell.scenario == NAIVE:
        return "-"
    ledger = cell.observation.ledger if cell.observation else None
    if ledger is None:
        return "?"
    return f"yes ({ledger.receipt_source})" if ledger.receipt_source else "no"


def _agents(seen: Observation | None) -> str:
    if seen is None:
        return "?"
    if len(seen.agents) > 1:
        fine = sum(1 for result in seen.agents if result.final_2xx)
        replayed = sum(1 for result in seen.agents if result.replayed)
        return f"{fine}/{len(seen.agents)} 2xx, {replayed} replayed"
    (result,) = seen.agents
    if not result.history:
        return "nothing"
    if seen.scenario == NAIVE:  # why it charged twice: the first answer never came
        return ", then ".join(result.history)
    tries = "1 try" if result.attempts == 1 else f"{result.attempts} tries"
    return f"{result.history[-1]} ({tries})"


def _verdict(cell: CellResult) -> str:
    if not cell.ok:
        return "[bold red]VIOLATION[/]: " + "; ".join(cell.violations)
    if cell.expected_duplicate:
        return f"[yellow]{cell.verdict}[/]"
    return f"[green]ok[/]: {cell.verdict}"


def report(console: Console, result: MatrixResult) -> None:
    """The table, then every violation spelled out with where its logs are."""
    console.print(render(result))
    for cell in result.cells:
        for violation in cell.violations:
            console.print(
                f"[bold red]violation[/] {cell.mode}{BY}{cell.scenario}: {violation} "
                f"(logs: {cell.logs})",
                highlight=False,
            )
    complete = len(result.cells) == len(MODES) * len(SCENARIOS)
    if result.ok and complete:
        console.print(
            "[green]The proxy left exactly one charge on the idempotent and "
            "reconcilable targets, no duplicate and a visible outcome_unknown on the "
            "unsafe one; the naive client double-charged.[/]"
        )
    elif result.ok:
        console.print(f"[green]No violation in the {len(result.cells)} cells run.[/]")


# --------------------------------------------------------------------------- command line


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run effect-broker's crash matrix.")
    parser.add_argument(
        "--database-url",
        help="a PostgreSQL server DSN on which databases may be created and dropped "
        "(default: an embedded PostgreSQL in a temporary directory)",
    )
    parser.add_argument("--workdir", type=Path, help="keep cell logs here")
    parser.add_argument("--mode", action="append", choices=MODES, dest="modes")
    parser.add_argument(
        "--scenario", action="append", choices=SCENARIOS, dest="scenarios"
    )
    parser.add_argument("--parallel", type=int, default=3, help="cells run at once")
    parser.add_argument(
        "--sabotage",
        choices=SABOTAGES,
        help="break the proxy on purpose, to see the matrix catch it",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # a log or a pipe: room for the table's verdicts
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="crash-matrix-"))

    def run(dsn: str) -> MatrixResult:
        return run_matrix(
            dsn,
            workdir / "cells",
            progress=lambda line: console.print(line, highlight=False),
            modes=args.modes or MODES,
            scenarios=args.scenarios or SCENARIOS,
            parallel=args.parallel,
            sabotage=args.sabotage,
        )

    if args.database_url:
        result = run(args.database_url)
    else:
        from effect_broker.embedded import embedded_postgres

        console.print("starting an embedded PostgreSQL ...")
        with embedded_postgres(
            workdir / "postgres", durable=False, keep_data=False
        ) as dsn:
            result = run(dsn)
    report(console, result)
    if result.ok and args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    elif not result.ok:
        console.print(f"cell logs kept in {workdir / 'cells'}", highlight=False)
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
