"""The ledger's side of master keys: which keys it knows, which seal what, the swap.

Re-encryption never goes through the effect state machine: it changes no status and no
version, so live workers are not fenced by it. Each swap is a compare-and-swap on the
old ciphertext itself, so a row rewritten since it was read is left alone (and found
again by the next sweep) instead of being overwritten.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from uuid import UUID

import asyncpg

from effect_broker.errors import MasterKeyError
from effect_broker.store.translate import translated

REQUEST = "request"
RECEIPT = "receipt"
ROOT = "idempotency root"


@dataclass(frozen=True, slots=True)
class SealedPayload:
    """One stored blob: the effect it belongs to, its tenant and the ciphertext."""

    effect_id: UUID
    tenant_id: str
    ciphertext: bytes


@dataclass(frozen=True, slots=True)
class KeyUsage:
    """How many payloads of one kind a key seals, and one effect among them."""

    key_id: str
    kind: str
    payloads: int
    example: str | None


class LedgerKeys:
    """Mixed into ``Store``: it shares the store's pool and queries."""

    _pool: asyncpg.Pool
    _sql: Mapping[str, str]

    async def master_key_ids(self) -> list[str]:
        """Ids of the master keys payloads here were encrypted under, oldest first.

        Empty means no proxy has started against this ledger yet: only then is a new
        master key harmless.
        """
        async with translated():
            rows = await self._pool.fetch(self._sql["list_master_keys"])
        return [row["key_id"] for row in rows]

    async def check_master_key(self, key_id: str, *, record: bool = True) -> None:
        """``check_master_keys`` for one key."""
        await self.check_master_keys([key_id], record=record)

    async def check_master_keys(
        self, key_ids: Sequence[str], *, record: bool = True
    ) -> None:
        """Refuse master keys none of which encrypted what is stored here.

        While a key is rotated out the configured list holds the new key and the old
        one; one key the ledger knows is enough. The first (encrypting) key is recorded
        (``record``), so a later start with only the new key is accepted, and a fresh
        ledger records the first key it sees.
        """
        async with translated():
            known = [
                row["key_id"]
                for row in await self._pool.fetch(self._sql["list_master_keys"])
            ]
            if known and not set(key_ids) & set(known):
                configured = ", ".join(key_ids)
                raise MasterKeyError(
                    "this database holds payloads encrypted under master key "
                    f"{', '.join(known)}, "
                    f"but the configured master key is {configured}; set "
                    "EFFECT_BROKER_MASTER_KEY (or EFFECT_BROKER_MASTER_KEYS) to include "
                    "the key this ledger was written with"
                )
            if record:
                await self._pool.execute(self._sql["record_master_key"], key_ids[0])

    async def _walk(self, query: str, *args: object) -> list[asyncpg.Record]:
        """A block that reads every stored payload on purpose: a whole-table read is
        its cheapest plan, which a ledger connection otherwise avoids at any cost."""
        async with translated(), self._pool.acquire() as conn, conn.transaction():
            await conn.execute("SET LOCAL enable_seqscan = on")
            return await conn.fetch(self._sql[query], *args)

    async def key_usage(self) -> list[KeyUsage]:
        rows = await self._walk("master_key_ids_of_payloads")
        return [
            KeyUsage(row["key_id"], row["kind"], row["payloads"], row["example"])
            for row in rows
        ]

    async def known_master_keys(self) -> list[str]:
        """The key ids the ledger accepts at start-up, oldest first."""
        async with translated():
            rows = await self._pool.fetch(self._sql["list_master_keys"])
        return [row["key_id"] for row in rows]

    async def not_under_key(
        self, kind: str, key_id: str, *, after: UUID, limit: int
    ) -> list[SealedPayload]:
        """Up to ``limit`` requests or receipts sealed under another key, by effect id."""
        query = "requests_not_under_key" if kind == REQUEST else "receipts_not_under_key"
        rows = await self._walk(query, key_id, after, limit)
        return [
            SealedPayload(row["effect_id"], row["tenant_id"], bytes(row["ciphertext"]))
            for row in rows
        ]

    async def reseal(
        self, kind: str, swaps: Sequence[tuple[SealedPayload, bytes]]
    ) -> set[UUID]:
        """Write each new ciphertext where the old one is still stored; those written."""
        if not swaps:
            return set()
        query = "reseal_requests" if kind == REQUEST else "reseal_receipts"
        async with translated():
            rows = await self._pool.fetch(
                self._sql[query],
                [old.tenant_id for old, _ in swaps],
                [old.effect_id for old, _ in swaps],
                [old.ciphertext for old, _ in swaps],
                [fresh for _, fresh in swaps],
            )
        return {row["effect_id"] for row in rows}

    async def idempotency_root(self, sealed_if_absent: bytes) -> bytes:
        """The stored sealed root, storing ``sealed_if_absent`` first if there is none.

        Concurrent first starts race on one row; every one of them reads the winner's.
        """
        async with translated():
            await self._pool.execute(self._sql["add_idempotency_root"], sealed_if_absent)
            stored: bytes = await self._pool.fetchval(self._sql["get_idempotency_root"])
        return bytes(stored)

    async def reseal_idempotency_root(self, old: bytes, fresh: bytes) -> bool:
        async with translated():
            status = await self._pool.execute(
                self._sql["reseal_idempotency_root"], old, fresh
            )
        return bool(status == "UPDATE 1")

    async def retire_master_keys(
        self, keep: Sequence[str], in_use: Sequence[str]
    ) -> None:
        """Forget keys neither kept nor sealing anything: start-up refuses them then."""
        async with translated():
            await self._pool.execute(
                self._sql["retire_master_keys"], list(keep), list(in_use)
            )
