"""Reconciliation latency: effects whose answer was lost, and how long until they settle.

For each safety class in turn, ``effects`` new effects go through an effect-broker of
their own (built-in reconciler on, as in production) to the demo payment target
(``python -m effect_broker.demo.payment_target``), armed first with
``hang_after_commit`` = ``effects``: every one of those charges commits at the target
and its answer never comes. The contract's timeout (1 s, as in the crash matrix) fires,
the request path marks the effect ``outcome_unknown`` and answers the client, and from
there only the reconciler can settle it, each class by its own proof:

* idempotent: sent again with the same key after a backoff (0.5-1 s for a first loss);
  the target replays the charge it already made;
* reconcilable: looked up by correlation id once the contract's ``settlement_bound`` has
  passed (before it, "not found" proves nothing);
* transactional: the target kit's lookup of the attempt key, due at once;
* unsafe: nothing. It can neither be sent again nor asked, so it stays
  ``outcome_unknown`` by design until an operator resolves it: a count, not a latency.

The classes run one after another, each once the one before has settled, so that a
class is measured alone and a resend of one class can never take a hang armed for the
next. Times come from the ledger itself (``effects.first_dispatched_at`` and each
effect's ``effect_events.occurred_at``), read with SQL once everything has settled, not
from polling each effect over HTTP: they are when the proxy and the reconciler wrote
each step, exact to the commit, whatever the bench's own polling interval.

Only effects that really were lost count: if a resend takes one of the armed hangs
before every first request has used its own, that first request is answered. Such
effects are reported as answered (not lost), and a resend that was lost again shows as
``lost again``; both are normally 0.
"""

from __future__ import annotations

import asyncio
import inspect
import secrets
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import yaml

from bench import ledger
from bench.procs import Server, child_env, start_server
from effect_broker.demo import payment_target

CLASSES = ("idempotent", "reconcilable", "transactional", "unsafe")
TIMEOUT_MS = 1000  # each contract's timeout: how long until a lost answer is noticed
SETTLEMENT_BOUND_MS = 500  # reconcilable: a lookup proves absence only after this ...
SETTLEMENT_DELAY_S = 0.3  # ... and the target's lookup lags its commits this much
LEASE_GRACE_MS = 300  # lease = timeout + this; only matters if the proxy itself dies
KIT_SECRET_ENV = "BENCH_KIT_SECRET"  # the proxy's routes read the kit's secret here
POLL_S = 0.2  # how often the bench looks at the ledger while it waits
#: How long past the last dispatch a class may take to settle before the bench stops
#: waiting and reports what is left (base, plus per effect: the reconciler is serial).
SETTLE_DEADLINE_S = (60.0, 0.2)
#: Unsafe effects are watched this long after they all went unknown, several
#: reconciler passes, to show that nothing settles them.
UNSAFE_WATCH_S = 3.0


def _reconciler_defaults() -> dict[str, float]:
    """The built-in reconciler's claim size and idle pause, read from its signature so
    that the report cannot drift from the code it describes."""
    from effect_broker.reconciler import Reconciler

    parameters = inspect.signature(Reconciler.__init__).parameters
    return {
        "batch": parameters["batch"].default,
        "idle_s": parameters["idle_seconds"].default,
    }


def routes_document(target_url: str) -> dict[str, Any]:
    """One contract and reverse-mode route per class, like the crash matrix's routes
    (the same target paths and 1 s timeouts), built here so the numbers the report
    cites are the ones in force."""
    timeout = f"{TIMEOUT_MS}ms"
    contracts: list[dict[str, Any]] = [
        {
            "name": "bench.idempotent",
            "safety": "idempotent",
            "idempotency_header": "Idempotency-Key",
            "key_retention": "1h",
        },
        {
            "name": "bench.reconcilable",
            "safety": "reconcilable",
            "correlation_header": "X-Correlation-Id",
            "settlement_bound": f"{SETTLEMENT_BOUND_MS}ms",
            "probe": {
                "method": "GET",
                "path": "/v1/charges?correlation_id={downstream_key}",
                "found": {"status": [200], "external_id": "/id"},
                "absent": {"status": [404]},
            },
        },
        {"name": "bench.unsafe", "safety": "unsafe"},
        {"name": "bench.transactional", "safety": "transactional"},
    ]
    routes = []
    for safety in CLASSES:
        route: dict[str, Any] = {
            "name": safety,
            "match": {"method": "POST", "path": f"/{safety}/v1/charges"},
            "strip_prefix": f"/{safety}",
            "upstream": f"{target_url.rstrip('/')}/{safety}",
            "contract": f"bench.{safety}",
        }
        if safety == "transactional":  # the kit's lookup and tombstone demand it
            route["inject_headers"] = {
                "Effect-Broker-Secret": f"${{env:{KIT_SECRET_ENV}}}"
            }
        routes.append(route)
    return {
        "version": 1,
        "proxy": {
            "operation_key_header": "Operation-Key",
            "unmatched": "reject-mutating",
        },
        "contracts": [
            {"version": "1", "timeout": timeout, **contract} for contract in contracts
        ],
        "routes": routes,
    }


@dataclass
class Setup:
    target: str
    proxy: str
    database_url: str


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- driving ---------------------------------------------------------------------------


async def _target_call(method: str, url: str, body: Any = None) -> Any:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, json=body) as answer,
    ):
        answer.raise_for_status()
        return await answer.json()


async def _lose(setup: Setup, safety: str, keys: list[str]) -> dict[str, int]:
    """Send one new effect per key, all at once, through the proxy; each answer the
    client gets (the proxy's, once its timeout fired), counted by Effect-Status."""
    limit = aiohttp.TCPConnector(limit=len(keys))
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_MS / 1000 + 60)
    url = f"{setup.proxy.rstrip('/')}/{safety}/v1/charges"

    async def one(session: aiohttp.ClientSession, key: str) -> str:
        body = {"amount": 1, "currency": "usd", "order_id": key}
        try:
            async with session.post(
                url, json=body, headers={"Operation-Key": key}
            ) as answer:
                await answer.read()
                return answer.headers.get("Effect-Status") or f"HTTP {answer.status}"
        except (aiohttp.ClientError, TimeoutError) as exc:
            return type(exc).__name__

    async with aiohttp.ClientSession(connector=limit, timeout=timeout) as session:
        answers = await asyncio.gather(*(one(session, key) for key in keys))
    return dict(Counter(answers))


# -- reading the ledger ----------------------------------------------------------------

# One row per effect of the class: when it was first dispatched, and its history in
# order (event kinds, the status each one left, when), from which ``summarize`` reads
# the loss (the proxy's ``outcome_unknown`` at its timeout), the reconciler's first
# claim after it, and the settling.
EFFECT_TIMES = """
SELECT e.status,
       e.attempts,
       e.first_dispatched_at,
       array_agg(v.kind ORDER BY v.seq) AS kinds,
       array_agg(v.to_status ORDER BY v.seq) AS statuses,
       array_agg(v.occurred_at ORDER BY v.seq) AS times
FROM effects e
JOIN effect_events v USING (tenant_id, effect_id)
WHERE e.route = $1 AND e.operation_key = ANY($2::text[])
GROUP BY e.tenant_id, e.effect_id
"""
STATUSES = """
SELECT status, count(*) AS n FROM effects
WHERE route = $1 AND operation_key = ANY($2::text[])
GROUP BY status
"""


async def _statuses(dsn: str, safety: str, keys: list[str]) -> dict[str, int]:
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        rows = await conn.fetch(STATUSES, safety, keys)
    finally:
        await conn.close()
    return {row["status"]: row["n"] for row in rows}


async def _times(dsn: str, safety: str, keys: list[str]) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        return list(await conn.fetch(EFFECT_TIMES, safety, keys))
    finally:
        await conn.close()


async def _wait_for(
    dsn: str, safety: str, keys: list[str], status: str, deadline: float
) -> dict[str, int]:
    """Poll the ledger until every effect of ``keys`` is in ``status`` or the
    deadline passes; the statuses last seen."""
    while True:
        seen = await _statuses(dsn, safety, keys)
        if seen.get(status, 0) >= len(keys) or time.monotonic() >= deadline:
            return seen
        await asyncio.sleep(POLL_S)


def _spread(seconds: list[float]) -> dict[str, float | None]:
    return {
        "p50_s": statistics.median(seconds) if seconds else None,
        "max_s": max(seconds) if seconds else None,
    }


def _since(later: datetime | None, earlier: datetime | None) -> float | None:
    if later is None or earlier is None:
        return None
    return (later - earlier).total_seconds()


def history(row: Mapping[str, Any]) -> dict[str, Any]:
    """The moments of one effect that the latency is made of, from its events.

    ``losses`` counts the request path's (or a resend's) ``outcome_unknown`` marks: a
    second one means a resend was lost too. ``settled_by`` is the step that proved the
    outcome (``dispatch`` for a resend, ``probe``, ``lookup``), the event before the
    settling one."""
    events = list(zip(row["kinds"], row["statuses"], row["times"], strict=True))
    lost = [at for kind, _, at in events if kind == "outcome_unknown"]
    settled = next(
        (n for n, (_, status, _) in enumerate(events) if status == "succeeded"), None
    )
    first_loss = lost[0] if lost else None
    claims = [
        at for kind, _, at in events if kind == "claimed" and lost and at >= lost[0]
    ]
    return {
        "dispatched_at": row["first_dispatched_at"],
        "lost_at": first_loss,
        "losses": len(lost),
        "claimed_at": claims[0] if claims else None,
        "settled_at": events[settled][2] if settled is not None else None,
        "settled_by": events[settled - 1][0] if settled else None,
    }


def summarize(rows: list[Mapping[str, Any]], effects: int) -> dict[str, Any]:
    """Per class: how many were lost, settled, lost again, and the latencies of the
    lost ones that settled: from their first dispatch, from the loss, and from the
    loss to the reconciler's first claim (the part its pass interval decides)."""
    seen = [history(row) for row in rows]
    lost = [one for one in seen if one["losses"] >= 1]
    settled = [one for one in lost if one["settled_at"] is not None]

    def spread(later: str, earlier: str, among: list[dict[str, Any]]) -> Any:
        found = [_since(one[later], one[earlier]) for one in among]
        return _spread([s for s in found if s is not None])

    last_settle = max((one["settled_at"] for one in settled), default=None)
    first_dispatch = min((one["dispatched_at"] for one in lost), default=None)
    return {
        "effects": effects,
        "recorded": len(rows),
        "lost": len(lost),
        "answered": len(rows) - len(lost),
        "lost_again": sum(1 for one in lost if one["losses"] >= 2),
        "settled": len(settled),
        "statuses": dict(Counter(row["status"] for row in rows)),
        "settled_by": dict(Counter(one["settled_by"] for one in settled)),
        "attempts_max": max((row["attempts"] for row in rows), default=0),
        "from_dispatch": spread("settled_at", "dispatched_at", settled),
        "from_loss": spread("settled_at", "lost_at", settled),
        "loss_to_claim": spread("claimed_at", "lost_at", settled),
        "all_settled_s": _since(last_settle, first_dispatch),
    }


# -- one class -------------------------------------------------------------------------


async def measure_class(setup: Setup, safety: str, effects: int) -> dict[str, Any]:
    """Lose ``effects`` answers of one class, wait until the reconciler has settled
    them (unsafe: until they all went unknown, then a few passes more), and read when
    each step happened from the ledger."""
    run = uuid.uuid4().hex[:8]
    keys = [f"reconcile-{run}-{safety}-{n}" for n in range(effects)]
    await _target_call("POST", f"{setup.target}/_faults", {"hang_after_commit": effects})
    started = time.monotonic()
    answers = await _lose(setup, safety, keys)
    # Every first request has been dispatched and answered by now: hangs still armed
    # belong to none of them, and must not catch the reconciler's resends.
    left = await _target_call("GET", f"{setup.target}/_faults")
    await _target_call("DELETE", f"{setup.target}/_faults")
    waited = SETTLE_DEADLINE_S[0] + SETTLE_DEADLINE_S[1] * effects
    if safety == "unsafe":
        seen = await _wait_for(
            setup.database_url, safety, keys, "outcome_unknown", time.monotonic() + 30
        )
        await asyncio.sleep(UNSAFE_WATCH_S)  # several passes: nothing may settle them
    else:
        seen = await _wait_for(
            setup.database_url, safety, keys, "succeeded", time.monotonic() + waited
        )
    wall = time.monotonic() - started
    rows = await _times(setup.database_url, safety, keys)
    found = summarize([dict(row) for row in rows], effects)
    found.update(
        {
            "client_answers": answers,
            "unused_hangs": left.get("hang_after_commit", 0),
            "wall_s": wall,
            "statuses_at_end": seen,
        }
    )
    return found


def bounds(safety: str) -> str:
    """What the latency of one class is made of, short enough for a table column; the
    reconciler's pass and the lease grace are spelled out in the report's notes."""
    timeout = f"timeout {TIMEOUT_MS / 1000:g} s"
    return {
        "idempotent": f"{timeout} + backoff 0.5-1 s + reconciler pass",
        "reconcilable": (
            f"{timeout} + settlement_bound {SETTLEMENT_BOUND_MS} ms + reconciler pass"
        ),
        "transactional": f"{timeout} + reconciler pass (lookup due at once)",
        "unsafe": "nothing: no resend, no lookup; an operator resolves it",
    }[safety]


# -- the section -----------------------------------------------------------------------


def measure(
    postgres: ledger.PostgresInfo,
    workdir: Path,
    effects: int,
    broker_command: list[str] | None = None,
) -> dict[str, Any]:
    """The whole section: a ledger and a target database of its own, the demo target
    and an effect-broker with its reconciler on; then every class in turn."""
    kit_secret = secrets.token_urlsafe(24)
    reconciler = _reconciler_defaults()
    classes: dict[str, Any] = {}
    with (
        ledger.bench_database(postgres) as dsn,
        ledger.bench_database(postgres, migrate=False) as target_dsn,
    ):
        target = _start_target(workdir, target_dsn, kit_secret)
        try:
            routes = workdir / "reconcile-routes.yaml"
            routes.write_text(
                yaml.safe_dump(routes_document(target.match.group(1)), sort_keys=False)
            )
            broker = ledger.start_broker(
                dsn,
                routes,
                workdir / "effect-broker-reconcile.log",
                broker_command,
                settings={
                    "EFFECT_BROKER_RECONCILER": "true",
                    "EFFECT_BROKER_LEASE_GRACE": f"{LEASE_GRACE_MS}ms",
                    # Every lost request holds a connection to the target for the whole
                    # timeout: the per-route budget (default 100) must not queue them.
                    "EFFECT_BROKER_UPSTREAM_CONNECTIONS": str(max(100, effects * 2)),
                    KIT_SECRET_ENV: kit_secret,
                },
            )
            try:
                setup = Setup(target.match.group(1), broker.proxy_url, dsn)
                for safety in CLASSES:
                    say(f"reconciliation: {effects:,} {safety} effects, answers lost")
                    found = asyncio.run(measure_class(setup, safety, effects))
                    found["bound"] = bounds(safety)
                    classes[safety] = found
                    say(_progress(safety, found))
            finally:
                broker.server.stop()
        finally:
            target.stop()
    return {
        "effects": effects,
        "timeout_ms": TIMEOUT_MS,
        "settlement_bound_ms": SETTLEMENT_BOUND_MS,
        "target_settlement_delay_s": SETTLEMENT_DELAY_S,
        "lease_grace_ms": LEASE_GRACE_MS,
        "reconciler": reconciler,
        "classes": classes,
    }


def _start_target(workdir: Path, target_dsn: str, kit_secret: str) -> Server:
    return start_server(
        "payment target",
        payment_target.command(
            workdir / "reconcile-target.sqlite3",
            settlement_delay=SETTLEMENT_DELAY_S,
            database_url=target_dsn,
        ),
        log=workdir / "reconcile-target.log",
        ready=payment_target.BANNER,
        env=child_env({payment_target.KIT_SECRET_ENV: kit_secret}),
    )


def _progress(safety: str, found: Mapping[str, Any]) -> str:
    if safety == "unsafe":
        unknown = found["statuses"].get("outcome_unknown", 0)
        return f"  {unknown:,} of {found['effects']:,} stay outcome_unknown (by design)"
    dispatch = found["from_dispatch"]
    shown = (
        f"p50 {dispatch['p50_s']:.2f} s, max {dispatch['max_s']:.2f} s from dispatch"
        if dispatch["p50_s"] is not None
        else "no latency"
    )
    return f"  {found['settled']:,} of {found['lost']:,} lost settled: {shown}"
