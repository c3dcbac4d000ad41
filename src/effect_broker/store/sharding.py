"""Whether the ledger is sharded by tenant: the one switch the store's branches read.

On one PostgreSQL a claim, a prune or a group commit is one statement across tenants,
and each one-row write is one statement (a CTE).
A ledger distributed on Citus (``store/distribute.py`` records that it was) refuses row
locks across shards and commits a write spanning shards with two-phase commit, so there
the store works tenant by tenant instead: the claims and the pruner
(``store/claims.py``) and the batches of the request path's writes
(``store/coalesced.py``). Each one-row write after a reservation calls its function
taking the tenant (``<write>_call``, migration 0014) instead of its statement: the
statement inserts from its own UPDATE's rows, which Citus runs in steps that make every
worker part of a two-phase commit, while the function, distributed by tenant, runs whole
on the tenant's worker. The store asks once and remembers the answer.
"""

from __future__ import annotations

from collections.abc import Mapping

import asyncpg

from effect_broker.store.distribute import is_distributed
from effect_broker.store.translate import translated


class Sharding:
    """Mixed into ``Store`` (through its claims and its coalesced writes)."""

    _pool: asyncpg.Pool
    _sql: Mapping[str, str]
    #: None until asked; tests set it to run the per-tenant branch on one PostgreSQL.
    _per_tenant: bool | None = None

    async def _sharded(self) -> bool:
        """Whether this ledger was distributed by tenant (then work goes per tenant)."""
        if self._per_tenant is None:
            async with translated(), self._pool.acquire() as conn:
                self._per_tenant = await is_distributed(conn)
        return self._per_tenant

    async def _write_sql(self, name: str) -> str:
        """A one-row write's statement: its function's call (``<name>_call``) on a
        sharded ledger, the statement ``name`` itself on one PostgreSQL."""
        if await self._sharded():
            return self._sql[f"{name}_call"]
        return self._sql[name]
