"""How long the engine holds an effect while it acts, and the send window that follows.

A lease must outlast everything its holder may still do to the target: the wait for a
free connection (``slots``), the contract's timeout, and a grace for the ledger write
that records the answer. The request path, the reconciler and a recorded stream all
ask here, so a lease means the same length wherever it is taken, and the send window
(``fence``) is always measured against that same length.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from effect_broker.config.contracts import Contract
from effect_broker.engine.fence import SendWindow


@dataclass(frozen=True, slots=True)
class Leases:
    """The lease lengths of one engine: its slots' queue bound and the default grace."""

    queue_timeout: timedelta
    default_grace: timedelta

    def lease_for(self, contract: Contract) -> timedelta:
        """How long a dispatch may run before its holder counts as dead: the queue for
        a free connection, the contract's timeout, and a grace for the ledger write."""
        return self.queue_timeout + contract.timeout + self.grace_for(contract)

    def grace_for(self, contract: Contract) -> timedelta:
        return contract.lease_grace or self.default_grace

    def window_for(self, contract: Contract) -> SendWindow:
        """The send window of a lease about to be asked for (call it *before* the
        write that takes the lease): its first byte may leave only inside it."""
        return SendWindow.asking_now(self.lease_for(contract), self.grace_for(contract))

    def streaming_lease(self, contract: Contract) -> timedelta:
        """The lease a flowing answer renews: at least one idle timeout and a grace,
        so a stream that keeps sending is never taken for a dead holder."""
        return max(
            self.lease_for(contract), contract.idle_timeout + self.grace_for(contract)
        )
