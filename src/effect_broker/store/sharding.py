"""Whether the ledger is sharded by tenant: the one switch the store's branches read.

On one PostgreSQL a claim, a prune or a group commit is one statement across tenants.
A ledger distributed on Citus (``store/distribute.py`` records that it was) refuses row
locks across shards and commits a write spanning shards with two-phase commit, so there
the store works tenant by tenant instead: the claims and the pruner
(``store/claims.py``) and the batches of the request path's writes
(``store/coalesced.py``). The store asks once and remembers the answer.
"""

from __future__ import annotations

import asyncpg

from effect_broker.store.distribute import is_distributed
from effect_broker.store.translate import translated


class Sharding:
    """Mixed into ``Store`` (through its claims and its coalesced writes)."""

    _pool: asyncpg.Pool
    #: None until asked; tests set it to run the per-tenant branch on one PostgreSQL.
    _per_tenant: bool | None = None

    async def _sharded(self) -> bool:
        """Whether this ledger was distributed by tenant (then work goes per tenant)."""
        if self._per_tenant is None:
            async with translated(), self._pool.acquire() as conn:
                self._per_tenant = await is_distributed(conn)
        return self._per_tenant
