"""The demo target's failures, armed at runtime through ``/_faults``.

Counts are used up one request at a time. ``hang_after_commit`` and
``fail_before_commit`` apply to every mode. The two *holds* exist only in transactional
mode (with ``--database-url``): the next charge stops inside its open transaction, after
its INSERT and before its receipt (``hold_before_receipt``) or after its receipt and
before COMMIT (``hold_before_commit``), until ``POST /_faults/release``. They stage the
races no other class can settle: the proxy's tombstone arriving while the attempt still
holds its transaction open. ``held`` (in ``GET /_faults``) says how many charges wait
now, so a test knows when the race is set up without sleeping.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("payment_target")

EVERY_MODE = ("hang_after_commit", "fail_before_commit", "stream_after_commit")
HOLDS = ("hold_before_receipt", "hold_before_commit")


@dataclass
class Faults:
    """Armed failure counts, and the charges held inside their transactions."""

    #: Whether the holds exist (the target has a transactional mode).
    transactional: bool = False
    hang_after_commit: int = 0
    fail_before_commit: int = 0
    stream_after_commit: int = 0
    hold_before_receipt: int = 0
    hold_before_commit: int = 0
    #: Handler tasks currently withholding an answer or holding a transaction,
    #: cancelled when the server stops (a held transaction then rolls back).
    withheld: set[asyncio.Task[Any]] = field(default_factory=set)
    held: int = 0
    _gate: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def armable(self) -> tuple[str, ...]:
        return EVERY_MODE + HOLDS if self.transactional else EVERY_MODE

    def take(self, name: str) -> bool:
        """Use up one armed fault called ``name``; False when none is left."""
        left: int = getattr(self, name)
        if left <= 0:
            return False
        setattr(self, name, left - 1)
        return True

    def as_json(self) -> dict[str, int]:
        """The armed counts (exactly the two of old unless transactional)."""
        return {name: getattr(self, name) for name in self.armable}

    def shown(self) -> dict[str, int]:
        """``as_json`` plus, when transactional, how many charges are held now."""
        if not self.transactional:
            return self.as_json()
        return {**self.as_json(), "held": self.held}

    def clear(self) -> None:
        for name in self.armable:
            setattr(self, name, 0)

    async def hold(self, name: str, subject: str) -> None:
        """Wait here, inside the caller's transaction, until ``release`` if armed."""
        if not self.take(name):
            return
        log.info("%s: transaction held open (fault %s)", subject, name)
        gate = self._gate
        task = asyncio.current_task()
        assert task is not None
        self.withheld.add(task)
        self.held += 1
        try:
            await gate.wait()
        finally:
            self.held -= 1
            self.withheld.discard(task)
        log.info("%s: released (fault %s)", subject, name)

    def release(self) -> int:
        """Let every held charge go on; how many there were."""
        released = self.held
        self._gate.set()
        self._gate = asyncio.Event()
        return released
