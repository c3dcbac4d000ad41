"""A demo payment service: the *target* whose own table proves how many charges happened.

effect-broker can only promise what the target behind it can prove, so the demos and the
crash matrix need a target with an authoritative record. This one keeps every charge in
a SQLite table (WAL mode) and commits each charge before it answers. After any crash,
timeout or retry storm, counting rows in ``charges`` is the ground truth.

It offers the three kinds of target that effect-broker's safety classes describe, chosen
by path prefix and all writing the same ``charges`` table:

``POST /idempotent/v1/charges`` (header ``Idempotency-Key``)
    Deduplicates like a real payment provider: the same key with the same body gets the
    stored response back (``Idempotent-Replayed: true``), the same key with another body
    gets 422. Keys are forgotten after ``--key-retention`` seconds, as real providers
    forget them: a retry after that horizon charges again. That is the retention risk.

``POST /reconcilable/v1/charges`` (header ``X-Correlation-Id``)
    Never deduplicates, but records the correlation id and answers
    ``GET /reconcilable/v1/charges?correlation_id=X`` (200 with the charge, or 404). The
    lookup is an eventually consistent index: a charge shows up there only
    ``--settlement-delay`` seconds after its commit, so a 404 is conclusive only after
    that bound.

``POST /unsafe/v1/charges``
    No key, no lookup: every request is a new charge. Nothing can tell a lost response
    from a request that never arrived.

For tests and humans: ``GET /charges`` lists every row, ``GET /charges/count?order_id=X``
counts them, ``GET /healthz`` answers 200. Failure injection, armed at runtime:
``POST /_faults`` with ``{"hang_after_commit": n}`` (commit, then never answer: "the
target committed but the response was lost") or ``{"fail_before_commit": n}`` (503
without writing anything), ``GET /_faults`` shows them, ``DELETE /_faults`` clears them.

Run it::

    python examples/payment_target.py --port 9000 --db /tmp/payments.sqlite3

It needs only the standard library and aiohttp, so it can run anywhere the proxy runs.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import re
import secrets
import signal
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

log = logging.getLogger("payment_target")

IDEMPOTENCY_HEADER = "Idempotency-Key"
CORRELATION_HEADER = "X-Correlation-Id"
REPLAYED_HEADER = "Idempotent-Replayed"

#: How long a withheld answer is held back: far longer than any client waits.
HANG_SECONDS = 3600.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS charges (
    id              TEXT PRIMARY KEY,
    mode            TEXT NOT NULL
                    CHECK (mode IN ('idempotent', 'reconcilable', 'unsafe')),
    idempotency_key TEXT,
    correlation_id  TEXT,
    payload_sha256  TEXT NOT NULL,
    amount          INTEGER NOT NULL,
    currency        TEXT NOT NULL,
    order_id        TEXT NOT NULL,
    created_at      REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS charges_correlation_id ON charges (correlation_id);
CREATE INDEX IF NOT EXISTS charges_order_id ON charges (order_id);

-- The provider's idempotency cache. Uniqueness lives here rather than on
-- charges.idempotency_key because keys expire: once a key is older than the retention,
-- its row is replaced and the same key may legitimately appear on a second charge.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    idempotency_key TEXT PRIMARY KEY,
    charge_id       TEXT NOT NULL REFERENCES charges (id),
    payload_sha256  TEXT NOT NULL,
    response_status INTEGER NOT NULL,
    response_body   BLOB NOT NULL,
    created_at      REAL NOT NULL
);
"""

_CURRENCY = re.compile(r"[a-z]{3}")


# --------------------------------------------------------------------------- payloads


class InvalidCharge(ValueError):
    """The request body is not a charge; answered 400 and never stored."""


@dataclass(frozen=True)
class ChargeRequest:
    """A validated charge body, plus the digest that idempotency compares."""

    amount: int
    currency: str
    order_id: str
    payload_sha256: str


def parse_charge(raw: bytes) -> ChargeRequest:
    """Validate a JSON charge body: ``{"amount": int > 0, "currency": "usd", ...}``.

    The digest is taken over the raw bytes, as providers do: a retry must resend the
    same body, not merely an equivalent one.
    """
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise InvalidCharge(f"body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidCharge("body must be a JSON object")
    amount = body.get("amount")
    if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0:
        raise InvalidCharge("amount must be a positive integer (minor units)")
    currency = body.get("currency")
    if not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
        raise InvalidCharge('currency must be a lowercase ISO code such as "usd"')
    order_id = body.get("order_id")
    if not isinstance(order_id, str) or not order_id:
        raise InvalidCharge("order_id must be a non-empty string")
    return ChargeRequest(amount, currency, order_id, hashlib.sha256(raw).hexdigest())


def charge_json(row: sqlite3.Row) -> dict[str, Any]:
    """The public shape of a stored charge, as created and as looked up."""
    shown: dict[str, Any] = {
        "id": row["id"],
        "amount": row["amount"],
        "currency": row["currency"],
        "order_id": row["order_id"],
        "status": "succeeded",
    }
    if row["correlation_id"] is not None:
        shown["correlation_id"] = row["correlation_id"]
    return shown


def encode(document: Any) -> bytes:
    """JSON bytes for a response; stored verbatim so replays are byte-identical."""
    return json.dumps(document).encode()


# --------------------------------------------------------------------------- storage


@dataclass(frozen=True)
class Created:
    """A new charge was committed; ``body`` is its 201 response."""

    charge_id: str
    body: bytes


@dataclass(frozen=True)
class Replayed:
    """A live key with the same payload: the stored response, nothing new written."""

    charge_id: str
    status: int
    body: bytes


@dataclass(frozen=True)
class Drifted:
    """A live key with a different payload: refused, nothing written."""

    charge_id: str


class ChargeStore:
    """The authoritative charges table in SQLite.

    Every method is blocking and opens its own connection, so handlers run them in
    worker threads (``asyncio.to_thread``) and concurrent requests really do race each
    other in SQLite, as they would against a real provider's database. Writes use
    ``BEGIN IMMEDIATE`` so check-then-insert happens under the write lock, and commit
    with ``synchronous=FULL`` before the caller is allowed to answer.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def initialize(self) -> None:
        """Create the schema and switch the file to WAL (a persistent file setting)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connection() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(SCHEMA)

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            yield conn
        finally:
            conn.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: committed on success, rolled back on any error."""
        with self._connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _insert(
        self,
        conn: sqlite3.Connection,
        mode: str,
        charge: ChargeRequest,
        *,
        idempotency_key: str | None = None,
        correlation_id: str | None = None,
    ) -> sqlite3.Row:
        charge_id = f"ch_{secrets.token_hex(12)}"
        conn.execute(
            "INSERT INTO charges (id, mode, idempotency_key, correlation_id,"
            " payload_sha256, amount, currency, order_id, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                charge_id,
                mode,
                idempotency_key,
                correlation_id,
                charge.payload_sha256,
                charge.amount,
                charge.currency,
                charge.order_id,
                time.time(),
            ),
        )
        row: sqlite3.Row = conn.execute(
            "SELECT * FROM charges WHERE id = ?", (charge_id,)
        ).fetchone()
        return row

    def charge_once(
        self, key: str, charge: ChargeRequest, *, key_retention: float
    ) -> Created | Replayed | Drifted:
        """Charge at most once per live idempotency key.

        ``BEGIN IMMEDIATE`` serialises the look-up and the insert; the primary key on
        ``idempotency_keys`` is the backstop, so if two writers ever did get past the
        look-up together, the loser rolls back its charge and reads the winner's answer.
        """
        for _ in range(2):
            try:
                with self._transaction() as conn:
                    return self._charge_once(conn, key, charge, key_retention)
            except sqlite3.IntegrityError:
                continue  # lost the race for the key: the next pass sees the winner
        raise RuntimeError(f"idempotency key {key!r} kept conflicting")

    def _charge_once(
        self,
        conn: sqlite3.Connection,
        key: str,
        charge: ChargeRequest,
        key_retention: float,
    ) -> Created | Replayed | Drifted:
        stored = conn.execute(
            "SELECT * FROM idempotency_keys WHERE idempotency_key = ?", (key,)
        ).fetchone()
        if stored is not None:
            if time.time() - stored["created_at"] < key_retention:
                if stored["payload_sha256"] != charge.payload_sha256:
                    return Drifted(stored["charge_id"])
                return Replayed(
                    stored["charge_id"],
                    stored["response_status"],
                    bytes(stored["response_body"]),
                )
            # Expired: the provider has forgotten this key, so this is a new charge.
            conn.execute("DELETE FROM idempotency_keys WHERE idempotency_key = ?", (key,))
        row = self._insert(conn, "idempotent", charge, idempotency_key=key)
        body = encode(charge_json(row))
        conn.execute(
            "INSERT INTO idempotency_keys (idempotency_key, charge_id, payload_sha256,"
            " response_status, response_body, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            (key, row["id"], charge.payload_sha256, 201, body, row["created_at"]),
        )
        return Created(row["id"], body)

    def charge(
        self, mode: str, charge: ChargeRequest, *, correlation_id: str | None = None
    ) -> Created:
        """Insert a charge unconditionally: what reconcilable and unsafe targets do."""
        with self._transaction() as conn:
            row = self._insert(conn, mode, charge, correlation_id=correlation_id)
        return Created(row["id"], encode(charge_json(row)))

    def find_settled(self, correlation_id: str, *, settled_before: float) -> bytes | None:
        """The oldest reconcilable charge with this correlation id, if already visible."""
        with self._connection() as conn:
            row = conn.execute(
                "SELECT * FROM charges WHERE mode = 'reconcilable' AND correlation_id = ?"
                " AND created_at <= ? ORDER BY created_at, id LIMIT 1",
                (correlation_id, settled_before),
            ).fetchone()
        return None if row is None else encode(charge_json(row))

    def list_charges(self, order_id: str | None = None) -> list[dict[str, Any]]:
        """Every row (optionally for one order), oldest first."""
        where, args = ("WHERE order_id = ?", (order_id,)) if order_id else ("", ())
        with self._connection() as conn:
            rows = conn.execute(
                "SELECT id, mode, idempotency_key, correlation_id, order_id, amount"
                f" FROM charges {where} ORDER BY created_at, id",
                args,
            ).fetchall()
        return [dict(row) for row in rows]

    def count(self, order_id: str | None = None) -> int:
        """How many charges really happened (optionally for one order)."""
        where, args = ("WHERE order_id = ?", (order_id,)) if order_id else ("", ())
        with self._connection() as conn:
            (n,) = conn.execute(f"SELECT count(*) FROM charges {where}", args).fetchone()
        return int(n)


# --------------------------------------------------------------------------- app state


@dataclass(frozen=True)
class Settings:
    """How this target behaves: fixed for the life of the process."""

    settlement_delay: float
    key_retention: float
    hang_prefixes: tuple[str, ...] = ()


@dataclass
class Faults:
    """Failures armed at runtime through ``/_faults``; each count is used up in turn."""

    hang_after_commit: int = 0
    fail_before_commit: int = 0
    #: Handler tasks currently withholding an answer, cancelled when the server stops.
    withheld: set[asyncio.Task[Any]] = field(default_factory=set)

    def take(self, name: str) -> bool:
        """Use up one armed fault called ``name``; False when none is left."""
        left: int = getattr(self, name)
        if left <= 0:
            return False
        setattr(self, name, left - 1)
        return True

    def as_json(self) -> dict[str, int]:
        return {
            "hang_after_commit": self.hang_after_commit,
            "fail_before_commit": self.fail_before_commit,
        }


STORE = web.AppKey("store", ChargeStore)
SETTINGS = web.AppKey("settings", Settings)
FAULTS = web.AppKey("faults", Faults)


class Answer(web.Response):
    """A JSON response that also carries the outcome written to the request log."""

    def __init__(
        self,
        status: int,
        body: bytes,
        outcome: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(
            status=status, body=body, content_type="application/json", headers=headers
        )
        self.outcome = outcome


def error(status: int, message: str) -> Answer:
    return Answer(status, encode({"error": message}), message)


# --------------------------------------------------------------------------- handlers


def _subject(request: web.Request) -> str:
    """The key or correlation id of a request, for the log line."""
    if key := request.headers.get(IDEMPOTENCY_HEADER):
        return f"key={key}"
    correlation = request.headers.get(CORRELATION_HEADER) or request.query.get(
        "correlation_id"
    )
    return f"correlation={correlation}" if correlation else "-"


@web.middleware
async def log_requests(
    request: web.Request,
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> web.StreamResponse:
    """One stderr line per request: method, path, key or correlation id, outcome."""
    line = f"{request.method} {request.path_qs} {_subject(request)}"
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        log.info("%s -> %s %s", line, exc.status, exc.reason)
        raise
    except Exception as exc:
        log.info("%s -> 500 %s", line, type(exc).__name__)
        raise
    log.info("%s -> %s %s", line, response.status, getattr(response, "outcome", ""))
    return response


async def _read_charge(request: web.Request) -> ChargeRequest | Answer:
    """The validated body, or the answer to give instead (an injected 503 or a 400)."""
    if request.app[FAULTS].take("fail_before_commit"):
        return Answer(
            503,
            encode({"error": "unavailable"}),
            "unavailable (fault fail_before_commit, nothing written)",
        )
    try:
        return parse_charge(await request.read())
    except InvalidCharge as exc:
        return error(400, f"invalid charge: {exc}")


async def _deliver(request: web.Request, answer: Answer) -> Answer:
    """Send a committed charge's answer, unless a fault says to lose it.

    A withheld answer models the worst case for any retrying client: the charge is
    committed, yet the caller sees only a timeout. The handler sleeps far longer than
    any client waits; stopping the server cancels it, dropping the connection unanswered.
    """
    faults = request.app[FAULTS]
    prefixes = request.app[SETTINGS].hang_prefixes
    if not (request.path.startswith(prefixes) or faults.take("hang_after_commit")):
        return answer
    log.info(
        "%s %s %s -> %s, answer withheld (fault hang_after_commit)",
        request.method,
        request.path_qs,
        _subject(request),
        answer.outcome,
    )
    task = asyncio.current_task()
    assert task is not None
    faults.withheld.add(task)
    try:
        await asyncio.sleep(HANG_SECONDS)
    finally:
        faults.withheld.discard(task)
    return answer


async def post_idempotent(request: web.Request) -> Answer:
    """Charge once per ``Idempotency-Key``: replay on repeat, 422 on payload drift."""
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if not key:
        return error(400, f"missing {IDEMPOTENCY_HEADER} header")
    charge = await _read_charge(request)
    if isinstance(charge, Answer):
        return charge
    retention = request.app[SETTINGS].key_retention
    result = await asyncio.to_thread(
        request.app[STORE].charge_once, key, charge, key_retention=retention
    )
    if isinstance(result, Drifted):
        return error(422, f"{IDEMPOTENCY_HEADER} was already used with another payload")
    if isinstance(result, Replayed):
        answer = Answer(
            result.status,
            result.body,
            f"replayed {result.charge_id}",
            headers={REPLAYED_HEADER: "true"},
        )
    else:
        answer = Answer(201, result.body, f"created {result.charge_id}")
    return await _deliver(request, answer)


async def post_reconcilable(request: web.Request) -> Answer:
    """Always charge, recording ``X-Correlation-Id`` so the charge can be looked up."""
    correlation_id = request.headers.get(CORRELATION_HEADER)
    if not correlation_id:
        return error(400, f"missing {CORRELATION_HEADER} header")
    charge = await _read_charge(request)
    if isinstance(charge, Answer):
        return charge
    created = await asyncio.to_thread(
        request.app[STORE].charge, "reconcilable", charge, correlation_id=correlation_id
    )
    answer = Answer(201, created.body, f"created {created.charge_id}")
    return await _deliver(request, answer)


async def get_reconcilable(request: web.Request) -> Answer:
    """Look a charge up by correlation id; only settled charges are visible.

    A 404 therefore means "not committed" only once ``--settlement-delay`` has passed
    since the request could have been committed; before that it proves nothing.
    """
    correlation_id = request.query.get("correlation_id")
    if not correlation_id:
        return error(400, "missing correlation_id query parameter")
    settled_before = time.time() - request.app[SETTINGS].settlement_delay
    found = await asyncio.to_thread(
        request.app[STORE].find_settled, correlation_id, settled_before=settled_before
    )
    if found is None:
        return error(404, "not found")
    return Answer(200, found, "found")


async def post_unsafe(request: web.Request) -> Answer:
    """Always charge; there is no key and no way to ask afterwards what happened."""
    charge = await _read_charge(request)
    if isinstance(charge, Answer):
        return charge
    created = await asyncio.to_thread(request.app[STORE].charge, "unsafe", charge)
    answer = Answer(201, created.body, f"created {created.charge_id}")
    return await _deliver(request, answer)


async def list_charges(request: web.Request) -> Answer:
    rows = await asyncio.to_thread(
        request.app[STORE].list_charges, request.query.get("order_id")
    )
    return Answer(200, encode(rows), f"{len(rows)} charges")


async def count_charges(request: web.Request) -> Answer:
    n = await asyncio.to_thread(request.app[STORE].count, request.query.get("order_id"))
    return Answer(200, encode({"count": n}), f"count {n}")


async def healthz(request: web.Request) -> Answer:
    return Answer(200, encode({"status": "ok"}), "ok")


async def get_faults(request: web.Request) -> Answer:
    return Answer(200, encode(request.app[FAULTS].as_json()), "faults")


async def arm_faults(request: web.Request) -> Answer:
    """Set fault counts from ``{"hang_after_commit": n, "fail_before_commit": n}``."""
    faults = request.app[FAULTS]
    try:
        wanted = json.loads(await request.read())
    except ValueError:
        return error(400, "body is not valid JSON")
    known = set(faults.as_json())
    if not isinstance(wanted, dict) or not wanted or set(wanted) - known:
        return error(400, f"expected an object with some of {sorted(known)}")
    for name, count in wanted.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            return error(400, f"{name} must be a non-negative integer")
    for name, count in wanted.items():
        setattr(faults, name, count)
    return Answer(200, encode(faults.as_json()), f"armed {wanted}")


async def clear_faults(request: web.Request) -> Answer:
    faults = request.app[FAULTS]
    faults.hang_after_commit = faults.fail_before_commit = 0
    return Answer(200, encode(faults.as_json()), "cleared")


async def _release_withheld(app: web.Application) -> None:
    """On shutdown, drop withheld answers at once instead of waiting out the hour."""
    for task in list(app[FAULTS].withheld):
        task.cancel()


def build_app(
    db_path: str | Path,
    *,
    settlement_delay: float,
    key_retention: float,
    hang_after_commit: Sequence[str] = (),
) -> web.Application:
    """The payment target as an aiohttp application, its database ready to use.

    ``hang_after_commit`` lists path prefixes whose charges always commit and then
    withhold their answer, in addition to faults armed at runtime via ``/_faults``.
    """
    if settlement_delay < 0 or key_retention < 0:
        raise ValueError("settlement_delay and key_retention must not be negative")
    store = ChargeStore(Path(db_path))
    store.initialize()
    app = web.Application(middlewares=[log_requests])
    app[STORE] = store
    app[SETTINGS] = Settings(settlement_delay, key_retention, tuple(hang_after_commit))
    app[FAULTS] = Faults()
    app.on_shutdown.append(_release_withheld)
    app.add_routes(
        [
            web.post("/idempotent/v1/charges", post_idempotent),
            web.post("/reconcilable/v1/charges", post_reconcilable),
            web.get("/reconcilable/v1/charges", get_reconcilable),
            web.post("/unsafe/v1/charges", post_unsafe),
            web.get("/charges", list_charges),
            web.get("/charges/count", count_charges),
            web.get("/healthz", healthz),
            web.get("/_faults", get_faults),
            web.post("/_faults", arm_faults),
            web.delete("/_faults", clear_faults),
        ]
    )
    return app


# --------------------------------------------------------------------------- command line


def _seconds(text: str) -> float:
    value = float(text)
    if not value >= 0:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Demo payment target with an authoritative SQLite charges table."
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument(
        "--port", type=int, default=9000, help="port to listen on (0: pick a free one)"
    )
    parser.add_argument("--db", required=True, type=Path, help="SQLite file to keep")
    parser.add_argument(
        "--settlement-delay",
        type=_seconds,
        default=0.5,
        metavar="SECONDS",
        help="how long a reconcilable charge stays invisible to the lookup",
    )
    parser.add_argument(
        "--key-retention",
        type=_seconds,
        default=86400.0,
        metavar="SECONDS",
        help="how long an idempotency key is remembered",
    )
    parser.add_argument(
        "--hang-after-commit",
        nargs="+",
        default=[],
        metavar="PATH_PREFIX",
        help="charges under these path prefixes commit and then never answer",
    )
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    """Listen until SIGTERM or SIGINT, then stop cleanly (withheld answers dropped)."""
    app = build_app(
        args.db,
        settlement_delay=args.settlement_delay,
        key_retention=args.key_retention,
        hang_after_commit=args.hang_after_commit,
    )
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=5.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, args.host, args.port)
        await site.start()
        host, port = runner.addresses[0][:2]
        url = f"http://{host}:{port}"
        print(f"payment target listening on {url} (db {args.db})", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(message)s"
    )
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
