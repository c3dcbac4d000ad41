"""How many wrong credentials one peer may present before it must wait (pure, no I/O).

Each wrong gateway credential can cost a ledger query (an unknown key id is looked up
every time), so a peer guessing keys would turn its guesses into database load, with
no limit. Each peer gets a token bucket: a wrong credential spends a token, tokens come
back at a steady rate, and a peer with none left is answered 429 with ``Retry-After``
before anything is looked up. A right credential costs nothing, so a tenant with a
working key is never slowed down by this.

The peers remembered are capped; past the cap the one seen least recently is forgotten
(it starts again with a full bucket, which only ever errs towards letting it try).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from ipaddress import IPv6Address, IPv6Network, ip_address

UNKNOWN_PEER = "unknown"  # a peer without an address (a Unix socket) shares one budget


def peer_key(address: str | None) -> str:
    """The budget a client address spends: an IPv4 address, or an IPv6 address's /64.

    One IPv6 host usually holds a whole /64 and can pick a new address per connection,
    so a budget per IPv6 address would be no budget at all.
    """
    if not address:
        return UNKNOWN_PEER
    try:
        parsed = ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(parsed, IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(IPv6Network((parsed, 64), strict=False))
    return str(parsed)


class CredentialBudget:
    """A token bucket of wrong-credential attempts per peer."""

    def __init__(
        self,
        *,
        burst: int = 10,
        per_second: float = 1.0,
        max_peers: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst = burst
        self.per_second = per_second
        self._max_peers = max_peers
        self._clock = clock
        # peer -> (tokens left, when they were counted)
        self._peers: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._peers)

    def _tokens(self, peer: str, now: float) -> float:
        tokens, counted = self._peers.get(peer, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - counted) * self.per_second)

    def wait(self, peer: str) -> float | None:
        """Seconds ``peer`` must wait before its next attempt counts, or None."""
        now = self._clock()
        tokens = self._tokens(peer, now)
        if tokens >= 1.0:
            return None
        return (1.0 - tokens) / self.per_second

    def spend(self, peer: str) -> None:
        """``peer`` presented a wrong credential: one token less."""
        now = self._clock()
        tokens = self._tokens(peer, now)
        self._peers[peer] = (max(0.0, tokens - 1.0), now)
        self._peers.move_to_end(peer)
        if len(self._peers) > self._max_peers:
            self._peers.popitem(last=False)
