"""Every driver error leaves the store as one of ours: nothing above it sees asyncpg."""

from __future__ import annotations

import asyncpg
import pytest

from effect_broker.errors import EffectBrokerError, StoreError, StoreUnavailable
from effect_broker.store.translate import translated


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
