"""The reconciler's and the pruner's claims: one statement, or tenant by tenant.

On one PostgreSQL a claim is one statement: the earliest due effects of every tenant,
locked with ``FOR UPDATE SKIP LOCKED`` in one ordered range scan. A distributed ledger
(Citus, sharded by tenant) refuses row locks across shards, so there the claim is two
steps: a lock-free list of the tenants with due work, oldest first, then one
single-shard ``SKIP LOCKED`` claim per tenant, each taking a fair share of what is left
of the limit. Which branch runs is decided once, from whether the ledger was
distributed (``store/sharding.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import timedelta

import asyncpg

from effect_broker.models import Effect
from effect_broker.store.rows import effect_of
from effect_broker.store.sharding import Sharding
from effect_broker.store.translate import translated


def fair_share(remaining: int, tenants_left: int) -> int:
    """How many of ``remaining`` claims the next of ``tenants_left`` tenants may take:
    an even split, rounded up so the limit is reached when tenants have enough work."""
    return max(1, math.ceil(remaining / max(1, tenants_left)))


class Claims(Sharding):
    """Mixed into ``Store``: it shares the store's pool and queries."""

    _pool: asyncpg.Pool
    _sql: Mapping[str, str]

    async def claim_due(
        self, *, owner: str, lease: timedelta, limit: int
    ) -> list[Effect]:
        """Lease effects whose wake-up time passed; rows another worker holds are skipped.

        Claiming bumps the version, so whoever held an expired lease is fenced from now
        on.
        """
        if not await self._sharded():
            async with translated("claim_due"):
                rows = await self._pool.fetch(self._sql["claim_due"], limit, owner, lease)
            return [effect_of(row) for row in rows]
        async with translated("claim_due"):
            tenants = await self._pool.fetch(self._sql["tenants_due"], limit)
        rows = await self._tenant_by_tenant(
            "claim_due",
            tenants,
            limit,
            lambda share, tenant: [share, owner, lease, tenant],
        )
        return [effect_of(row) for row in rows]

    async def prune_settled(
        self, retention: Mapping[str, timedelta], *, limit: int
    ) -> list[str]:
        """Delete up to ``limit`` settled effects, whole, past their contract's ledger
        retention (by contract name); return the route of each one deleted.

        The only way anything leaves the ledger: the database itself refuses to delete
        an unsettled effect, or a receipt or event of an effect that still exists. An
        effect whose key retention is still ahead stays, so a replay after pruning is a
        new effect only once the target may have forgotten the key too.
        """
        names, kept = list(retention), list(retention.values())
        if not await self._sharded():
            async with translated("prune_settled"):
                rows = await self._pool.fetch(
                    self._sql["prune_settled"], names, kept, limit
                )
            return [row["route"] for row in rows]
        async with translated("prune_settled"):
            tenants = await self._pool.fetch(
                self._sql["tenants_prunable"], names, kept, limit
            )
        rows = await self._tenant_by_tenant(
            "prune_settled",
            tenants,
            limit,
            lambda share, tenant: [names, kept, share, tenant],
        )
        return [row["route"] for row in rows]

    async def _tenant_by_tenant(
        self,
        block: str,
        tenants: list[asyncpg.Record],
        limit: int,
        arguments: Callable[[int, str], list[object]],
    ) -> list[asyncpg.Record]:
        """Run ``<block>_of_tenant`` for each tenant in turn, each with its fair share
        of what is left of ``limit`` (``arguments(share, tenant)`` gives its
        parameters), until the limit is reached: the sharded ledger's claim and prune."""
        found: list[asyncpg.Record] = []
        for position, row in enumerate(tenants):
            remaining = limit - len(found)
            if remaining <= 0:
                break
            share = fair_share(remaining, len(tenants) - position)
            async with translated(block):
                found.extend(
                    await self._pool.fetch(
                        self._sql[f"{block}_of_tenant"],
                        *arguments(share, row["tenant_id"]),
                    )
                )
        return found
