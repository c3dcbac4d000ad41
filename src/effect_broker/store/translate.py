"""Driver errors become ours at the store's edge, so nothing above it knows asyncpg.

The split that matters to callers: ``StoreUnavailable`` (the database could not be
reached or was going away; the operation did not happen) against ``StoreError`` (the
database refused the operation itself).
"""

from __future__ import annotations

import re
from contextlib import AbstractContextManager
from types import TracebackType

import asyncpg
from opentelemetry.trace import Span

from effect_broker.errors import (
    EffectBrokerError,
    ReceiptExists,
    StoreError,
    StoreUnavailable,
)
from effect_broker.tracing import ledger_span, untraced

#: The receipt's primary key: a second receipt for one effect violates it.
RECEIPT_KEY = "effect_receipts_pkey"

# A shard's copy of a constraint is named like the declared one plus "_<shard id>"
# (Citus: effect_receipts_pkey_102028). No constraint the migrations declare ends in
# "_<digits>" (a unit test reads the declared schema to keep it so), so the suffix
# can be stripped from any name without mistaking one constraint for another.
_SHARD_SUFFIX = re.compile(r"_[0-9]+$")
# The constraint PostgreSQL names in the message of a class 23 error.
_QUOTED_CONSTRAINT = re.compile(r'\bconstraint "([^"]+)"')


class translated:
    """``async with translated(...)``: driver errors become ours, so nothing above the
    store knows about asyncpg.

    With ``operation`` (the statement's name) the call is also a span of its own, when
    there is a trace to record it in. A plain class rather than a generator-based
    context manager: every ledger call on the request path goes through it.
    """

    __slots__ = ("_span",)

    def __init__(self, operation: str | None = None) -> None:
        self._span: AbstractContextManager[Span] | None = (
            None if operation is None or untraced() else ledger_span(operation)
        )

    async def __aenter__(self) -> None:
        if self._span is not None:
            self._span.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        ours = None if exc is None else ours_for(exc)
        if self._span is not None:
            failure = ours or exc
            self._span.__exit__(
                None if failure is None else type(failure),
                failure,
                None if failure is None else failure.__traceback__,
            )
        if ours is not None:
            raise ours from exc


def ours_for(exc: BaseException) -> EffectBrokerError | None:
    """The error of ours a driver error stands for; None for anything else, which
    passes through as it is."""
    if isinstance(
        exc,
        OSError
        | asyncpg.PostgresConnectionError
        | asyncpg.InterfaceError
        # A connection left mid-protocol by a server restart ("cannot switch to state
        # 12; another operation is in progress"): the database, not the request, failed.
        | asyncpg.InternalClientError,
    ):
        return StoreUnavailable(f"the ledger database is unreachable: {exc}")
    if isinstance(exc, asyncpg.UniqueViolationError):  # SQLSTATE 23505
        constraint = constraint_of(exc)
        if constraint == RECEIPT_KEY:
            return ReceiptExists()
        return StoreError(f"unique constraint {constraint} refused a write")
    if isinstance(exc, asyncpg.OperatorInterventionError):  # class 57: shutdown, restart
        return StoreUnavailable(
            f"the ledger database is starting or shutting down: {exc}"
        )
    if isinstance(exc, asyncpg.PostgresError):
        return StoreError(f"the ledger refused the operation: {exc}")
    return None


def constraint_of(exc: asyncpg.PostgresError) -> str | None:
    """The constraint an error is about, by the name the migrations declare.

    Errors are told apart by SQLSTATE (the exception class) and this identity, never
    by table name: through a distributed engine's coordinator an error reaches us with
    ``table_name`` and ``constraint_name`` unset, naming the shard's copy of the
    constraint in its message only (``effect_receipts_pkey_102028``), and the table a
    shard reports is the shard's (``effect_receipts_102028``).
    """
    name = exc.constraint_name
    if not name:
        found = _QUOTED_CONSTRAINT.search(str(getattr(exc, "message", None) or exc))
        name = found.group(1) if found else None
    return _SHARD_SUFFIX.sub("", name) if name else None


_FIX_WHERE = (
    "check that PostgreSQL runs there and accepts TCP connections, and that "
    "--database-url (EFFECT_BROKER_DATABASE_URL) names it; without a URL, "
    "`effect-broker up` starts an embedded PostgreSQL"
)


def connect_failure(where: str, exc: BaseException) -> EffectBrokerError | None:
    """Why the first connection failed, naming the server and what to do about it.

    ``where`` is the host:port list the DSN names (never its password). A refused
    connection or an unknown host alone ("[Errno 111] Connection refused") leaves a
    person guessing which server was meant and what to change.
    """
    if isinstance(
        exc, asyncpg.InvalidPasswordError | asyncpg.InvalidAuthorizationSpecificationError
    ):
        return StoreUnavailable(
            f"the ledger database at {where} refused the login ({exc}); check the user "
            "and password in --database-url (EFFECT_BROKER_DATABASE_URL)"
        )
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        return StoreUnavailable(
            f"the PostgreSQL server at {where} has no such database ({exc}); create "
            "it (e.g. `createdb`) or name an existing one in --database-url "
            "(EFFECT_BROKER_DATABASE_URL)"
        )
    ours = ours_for(exc)
    if isinstance(ours, StoreUnavailable):
        return StoreUnavailable(
            f"the ledger database at {where} is unreachable ({exc}); {_FIX_WHERE}"
        )
    return ours
