"""Driver errors become ours at the store's edge, so nothing above it knows asyncpg.

The split that matters to callers: ``StoreUnavailable`` (the database could not be
reached or was going away; the operation did not happen) against ``StoreError`` (the
database refused the operation itself).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext

import asyncpg

from effect_broker.errors import ReceiptExists, StoreError, StoreUnavailable
from effect_broker.tracing import ledger_span


@asynccontextmanager
async def translated(operation: str | None = None) -> AsyncIterator[None]:
    """Turn driver errors into ours, so nothing above the store knows about asyncpg.

    With ``operation`` (the statement's name) the call is also a span of its own.
    """
    with ledger_span(operation) if operation else nullcontext():
        async with _translated_errors():
            yield


@asynccontextmanager
async def _translated_errors() -> AsyncIterator[None]:
    try:
        yield
    except (
        OSError,
        asyncpg.PostgresConnectionError,
        asyncpg.InterfaceError,
        # A connection left mid-protocol by a server restart ("cannot switch to state
        # 12; another operation is in progress"): the database, not the request, failed.
        asyncpg.InternalClientError,
    ) as exc:
        raise StoreUnavailable(f"the ledger database is unreachable: {exc}") from exc
    except asyncpg.UniqueViolationError as exc:
        if exc.table_name == "effect_receipts":
            raise ReceiptExists() from exc
        raise StoreError(
            f"unique constraint {exc.constraint_name} refused a write"
        ) from exc
    except asyncpg.OperatorInterventionError as exc:  # class 57: shutdown, restart
        raise StoreUnavailable(
            f"the ledger database is starting or shutting down: {exc}"
        ) from exc
    except asyncpg.PostgresError as exc:
        raise StoreError(f"the ledger refused the operation: {exc}") from exc
