"""Master key rotation: every stored payload sealed again under the encrypting key.

``rotate`` runs while proxies serve. It reads a batch of requests or receipts sealed
under any other key, re-encrypts each (``Keyring.reseal`` decrypts, encrypts the same
bytes and checks the new blob opens to them) and swaps it in with a compare-and-swap on
the old ciphertext, so a concurrent write is never overwritten; a row that changed is
simply found again by the next sweep. Nothing else about an effect changes: no status,
no version, no event, so no worker is fenced by a rotation.

The idempotency root lives here too: the secret tenant HMAC keys derive from, so that
downstream idempotency keys do not change when the encrypting key does.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from uuid import UUID

from effect_broker.crypto import KEY_BYTES, Keyring, blob_key_id
from effect_broker.errors import DecryptionError
from effect_broker.store import Store
from effect_broker.store.keys import RECEIPT, REQUEST, SealedPayload

log = logging.getLogger("effect_broker.rekey")

_NO_EFFECT = UUID(int=0)
_ROOT_WHERE = {"tenant_id": "", "effect_id": "ledger", "kind": "idempotency-root"}
MAX_SWEEPS = 3


async def with_idempotency_root(store: Store, keyring: Keyring) -> Keyring:
    """``keyring`` with the ledger's idempotency root, created at the first start."""
    fresh = keyring.encrypt(**_ROOT_WHERE, plaintext=os.urandom(KEY_BYTES))
    sealed = await store.idempotency_root(fresh)
    return keyring.with_hmac_root(keyring.decrypt(**_ROOT_WHERE, blob=sealed))


@dataclass
class RotationReport:
    """What a rotation did; ``unreadable`` names payloads no configured key opens."""

    key_id: str
    resealed: dict[str, int] = field(default_factory=lambda: {REQUEST: 0, RECEIPT: 0})
    raced: int = 0
    unreadable: dict[str, list[str]] = field(default_factory=dict)
    remaining: int = 0

    @property
    def complete(self) -> bool:
        return self.remaining == 0 and not self.unreadable


async def _sweep(
    store: Store, keyring: Keyring, kind: str, batch: int, report: RotationReport
) -> int:
    """One pass over every payload of ``kind`` not under the encrypting key."""
    after, left = _NO_EFFECT, 0
    while True:
        rows = await store.not_under_key(kind, keyring.key_id, after=after, limit=batch)
        if not rows:
            return left
        after = rows[-1].effect_id
        swaps: list[tuple[SealedPayload, bytes]] = []
        for row in rows:
            try:
                fresh = keyring.reseal(
                    tenant_id=row.tenant_id,
                    effect_id=str(row.effect_id),
                    kind="request" if kind == REQUEST else "response",
                    blob=row.ciphertext,
                )
            except DecryptionError as exc:
                key = blob_key_id(row.ciphertext) or "?"
                report.unreadable.setdefault(key, []).append(str(row.effect_id))
                log.warning("%s of effect %s: %s", kind, row.effect_id, exc.message)
                continue
            swaps.append((row, fresh))
        written = await store.reseal(kind, swaps)
        report.resealed[kind] += len(written)
        raced = len(swaps) - len(written)
        report.raced += raced
        left += raced


async def rotate(store: Store, keyring: Keyring, *, batch: int = 100) -> RotationReport:
    """Seal every stored request, receipt and the idempotency root under the first key.

    Sweeps again while rows changed under it (at most ``MAX_SWEEPS``); afterwards the
    ledger forgets every other master key that seals nothing any more, so a start with
    only a retired key is refused instead of writing under it again.
    """
    report = RotationReport(key_id=keyring.key_id)
    for kind in (REQUEST, RECEIPT):
        for _ in range(MAX_SWEEPS):
            if await _sweep(store, keyring, kind, batch, report) == 0:
                break
    root = await store.idempotency_root(
        keyring.encrypt(**_ROOT_WHERE, plaintext=os.urandom(KEY_BYTES))
    )
    if blob_key_id(root) != keyring.key_id:
        fresh = keyring.reseal(**_ROOT_WHERE, blob=root)
        await store.reseal_idempotency_root(root, fresh)  # a race shows in the count
    usage = await store.key_usage()
    in_use = sorted({use.key_id for use in usage})
    report.remaining = sum(u.payloads for u in usage if u.key_id != keyring.key_id)
    await store.retire_master_keys([keyring.key_id], in_use)
    return report
