"""The engine's one writer: a ruling, an attempt's start or a lease, through the port.

``rulings.rule`` decides; this writes what it decided, through the ``Ledger`` port,
and nothing else in the engine writes an effect's state. Every write here is a
compare-and-swap on the effect's version (``StaleVersion`` when another worker moved
it first) and is checked against ``state_machine`` by the store. A receipt is sealed
here, for this effect alone, before it reaches the database.
"""

from __future__ import annotations

from datetime import timedelta

from effect_broker import failpoints
from effect_broker.config.contracts import Contract
from effect_broker.engine.messages import StoredResponse
from effect_broker.engine.next_state import Ruling, Settling
from effect_broker.engine.sealed import seal_response
from effect_broker.engine.wiring import Wiring
from effect_broker.models import Effect

# In a receipt whose body was longer than a receipt holds: the body was left out.
TRUNCATED_HEADER = "Effect-Receipt-Truncated"


class Recorder:
    """Writes under one owner's name (a proxy worker's, the reconciler's)."""

    def __init__(self, wiring: Wiring, *, owner: str) -> None:
        self._store = wiring.store
        self._keyring = wiring.keyring
        self._metrics = wiring.metrics
        self.owner = owner

    async def write(
        self, effect: Effect, ruling: Ruling, *, actor: str | None = None
    ) -> Effect:
        """Move ``effect`` to the ruled state: one transition, or a settlement with
        its receipt in one commit. ``actor``: who is named in the history (an
        operator), the owner by default."""
        if ruling.receipt is not None:
            return await self._settle(effect, ruling, ruling.receipt, actor)
        return await self._store.transition(
            effect,
            ruling.status,
            kind=ruling.kind,
            actor=actor or self.owner,
            details=ruling.details,
            lease_owner=None if ruling.lease is None else self.owner,
            lease=ruling.lease,
            due_in=ruling.due_in,
            error=ruling.error,
            settle_within=ruling.settle_within,
        )

    async def start(self, effect: Effect, contract: Contract, lease: timedelta) -> Effect:
        """Commit DISPATCHING, the attempt and the lease: only then may bytes leave.

        Raises ``StaleVersion`` when another worker moved the effect first.
        """
        return await self._store.start_attempt(
            effect,
            owner=self.owner,
            lease=lease,
            key_retention=contract.key_retention,
            settlement_bound=contract.settlement_bound,
        )

    async def renew(self, effect: Effect, lease: timedelta) -> Effect:
        """Hold the effect ``lease`` longer (a flowing answer's holder is alive)."""
        return await self._store.renew_lease(effect, owner=self.owner, lease=lease)

    async def reschedule(
        self,
        effect: Effect,
        delay: timedelta | None,
        *,
        actor: str | None = None,
        error: str | None = None,
    ) -> Effect:
        """Let go of an effect without moving it; ``delay=None``: due for nobody but a
        person."""
        return await self._store.reschedule(
            effect, delay=delay, actor=actor or self.owner, error=error
        )

    async def _settle(
        self, effect: Effect, ruling: Ruling, receipt: Settling, actor: str | None
    ) -> Effect:
        """Seal the receipt for this effect and settle it with it, in one commit.

        The body is left out (and the receipt says so) when it is longer than a
        receipt holds; the head, and the status code, are always kept.
        """
        response = receipt.response
        kept = (
            StoredResponse(
                response.status,
                response.reason,
                [*response.headers, (TRUNCATED_HEADER, "true")],
                b"",
            )
            if receipt.omit_body
            else response
        )
        omitted = {"body_omitted": True} if receipt.omit_body else {}
        settled, _ = await self._store.record_receipt(
            effect,
            status=ruling.status,
            status_code=response.status,
            response_ciphertext=seal_response(self._keyring, effect, kept),
            source=receipt.source,
            actor=actor or self.owner,
            external_id=receipt.external_id,
            kind=ruling.kind,
            details={**(ruling.details or {}), **omitted},
        )
        failpoints.hit(failpoints.AFTER_RECEIPT_COMMIT)
        self._metrics.count(self._metrics.effects, settled.route, settled.status.value)
        return settled
