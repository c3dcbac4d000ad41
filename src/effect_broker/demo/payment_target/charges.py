"""The demo target's charges: request bodies, and the SQLite table that is ground truth.

Kept apart from the HTTP handlers so the rules that make the table authoritative
(commit before answering, one charge per live idempotency key, keys that expire) can be
read, and tested, without a server.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
