"""Every driver error leaves the store as one of ours: nothing above it sees asyncpg."""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg
import pytest

from effect_broker.errors import (
    EffectBrokerError,
    ReceiptExists,
    StoreError,
    StoreUnavailable,
)
from effect_broker.store.translate import RECEIPT_KEY, constraint_of, translated


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (ConnectionResetError("reset"), StoreUnavailable),
        (asyncpg.ConnectionDoesNotExistError("gone"), StoreUnavailable),
        (asyncpg.InterfaceError("pool is closing"), StoreUnavailable),
        (
            asyncpg.InternalClientError(
                "cannot switch to state 12; another operation is in progress"
            ),
            StoreUnavailable,
        ),
        (asyncpg.CannotConnectNowError("starting up"), StoreUnavailable),
        (asyncpg.AdminShutdownError("terminating"), StoreUnavailable),
        (asyncpg.SerializationError("retry"), StoreError),
        (asyncpg.DataError("bad value"), StoreError),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else "",
)
async def test_driver_errors_are_translated(
    raised: Exception, expected: type[EffectBrokerError]
) -> None:
    with pytest.raises(expected):
        async with translated():
            raise raised


def _postgres_error(fields: dict[str, str]) -> asyncpg.PostgresError:
    """An error as the driver builds it from the server's fields (one letter each:
    C SQLSTATE, M message, t table, n constraint)."""
    error = asyncpg.PostgresError.new(fields)
    assert isinstance(error, asyncpg.PostgresError)
    return error


DUPLICATE_RECEIPT = 'duplicate key value violates unique constraint "{}"'


@pytest.mark.parametrize(
    "fields",
    [
        # One PostgreSQL: every field set.
        {
            "C": "23505",
            "M": DUPLICATE_RECEIPT.format("effect_receipts_pkey"),
            "t": "effect_receipts",
            "n": "effect_receipts_pkey",
        },
        # Through a coordinator: no table or constraint field, the shard's name.
        {"C": "23505", "M": DUPLICATE_RECEIPT.format("effect_receipts_pkey_102028")},
        # A shard reporting itself: the shard's table and constraint names.
        {
            "C": "23505",
            "M": DUPLICATE_RECEIPT.format("effect_receipts_pkey_102028"),
            "t": "effect_receipts_102028",
            "n": "effect_receipts_pkey_102028",
        },
    ],
    ids=["postgres", "coordinator", "shard"],
)
async def test_a_second_receipt_is_known_by_its_constraint_wherever_it_comes_from(
    fields: dict[str, str],
) -> None:
    with pytest.raises(ReceiptExists):
        async with translated():
            raise _postgres_error(fields)


@pytest.mark.parametrize(
    "fields",
    [
        # The same table, another unique constraint: not a second receipt.
        {
            "C": "23505",
            "M": DUPLICATE_RECEIPT.format("effect_receipts_external_id_key_102028"),
        },
        # The effects table's key, through a coordinator.
        {"C": "23505", "M": DUPLICATE_RECEIPT.format("effects_pkey_102008")},
        # A unique violation naming no constraint at all.
        {"C": "23505", "M": "duplicate key value", "t": "effect_receipts"},
        # The receipt's key named, but another SQLSTATE (a foreign key's, say).
        {"C": "23503", "M": DUPLICATE_RECEIPT.format("effect_receipts_pkey_102028")},
    ],
    ids=["other-constraint", "effects-key", "unnamed", "other-sqlstate"],
)
async def test_other_refusals_are_not_taken_for_a_second_receipt(
    fields: dict[str, str],
) -> None:
    with pytest.raises(StoreError) as raised:
        async with translated():
            raise _postgres_error(fields)
    assert not isinstance(raised.value, ReceiptExists)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"C": "23505", "M": "x", "n": "effects_tenant_operation_key"},
            "effects_tenant_operation_key",
        ),
        (
            {"C": "23505", "M": DUPLICATE_RECEIPT.format("effects_pkey_102008")},
            "effects_pkey",
        ),
        (
            {"C": "23505", "M": "x", "n": "effect_events_pkey_102044"},
            "effect_events_pkey",
        ),
        ({"C": "23505", "M": "duplicate key value"}, None),
    ],
    ids=["declared", "from-message", "shard-field", "none"],
)
def test_constraint_names_lose_their_shard_suffix(
    fields: dict[str, str], expected: str | None
) -> None:
    assert constraint_of(_postgres_error(fields)) == expected


def test_no_declared_constraint_looks_like_a_shard_copy() -> None:
    """Stripping "_<digits>" is only safe while no constraint of ours ends that way."""
    declared = (
        Path(__file__).parents[2] / "src/effect_broker/store/declared_schema.txt"
    ).read_text()
    section = declared.split("## constraints\n")[1].split("\n\n")[0]
    names = [line.split(" ")[1].rstrip(":") for line in section.splitlines()]
    assert RECEIPT_KEY in names
    assert [name for name in names if re.search(r"_[0-9]+$", name)] == []
