"""The ledger's table of recorded MCP calls running right now, shared by every worker.

A cancellation of a recorded call must be withheld by whichever worker it reaches, not
only by the one running the call: with several workers (or replicas) on one address,
the client's ``notifications/cancelled`` lands anywhere. Each running call is a row,
keyed by a digest the MCP adapter computes; a row is deleted when its call ends, and
one its worker never deleted (the process died) stops counting at its expiry.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from uuid import UUID, uuid4

import asyncpg

from effect_broker.store.translate import translated


class RunningCalls:
    """Mixed into ``Store``: it shares the store's pool and queries."""

    _pool: asyncpg.Pool
    _sql: Mapping[str, str]

    async def begin_mcp_call(self, call_key: bytes, *, expires_in: timedelta) -> UUID:
        """Note a call as running (committed before its request may leave); the id is
        given back to ``end_mcp_call``."""
        running_id = uuid4()
        async with translated("begin_mcp_call"):
            await self._pool.execute(
                self._sql["begin_mcp_call"], running_id, call_key, expires_in
            )
        return running_id

    async def end_mcp_call(self, running_id: UUID) -> None:
        async with translated("end_mcp_call"):
            await self._pool.execute(self._sql["end_mcp_call"], running_id)

    async def mcp_call_running(self, call_key: bytes) -> bool:
        """Whether any worker runs a call under this key (expired rows do not)."""
        async with translated():
            running: bool = await self._pool.fetchval(
                self._sql["mcp_call_running"], call_key
            )
        return running
