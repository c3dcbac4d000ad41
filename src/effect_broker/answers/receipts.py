"""Settled effects that clients keep retrying, answered without the database.

A settled effect never changes again (its status is terminal and a trigger refuses any
change to its receipt), so a copy in memory can never go stale. Only effects that were
actually replayed are kept, so a stream of new effects does not fill memory; the cache
is bounded by bytes and evicts the least recently used. Other proxy processes keep
their own; a miss simply goes to the ledger.

A copy is only good while the ledger still holds the effect: once the reconciler may
have pruned it (past ``ledger_retention``), the key starts a new effect there, and the
cache must not answer for it with the old receipt. Each entry therefore expires when
the ledger may first prune its effect.

Both adapters go through ``cached`` before the engine and ``noted`` after it, so an MCP
retry of a settled tool call is answered from memory exactly as an HTTP retry is, and
both count their replays and conflicts alike. The ledger keys effects by tenant and
operation key whatever the adapter, and so does the cache.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from effect_broker.config.contracts import Route
from effect_broker.engine import Conflict, Outcome, Replayed, StoredResponse
from effect_broker.metrics import Metrics
from effect_broker.models import Effect, ReceiptSource

ENTRY_OVERHEAD = 512  # rough bytes per entry beyond headers and body


@dataclass(frozen=True, slots=True)
class SettledReplay:
    effect: Effect
    response: StoredResponse
    source: ReceiptSource
    prunable_at: datetime  # from then on only the ledger may say what the key means
    # Bytes held, counted once: put, eviction and expiry each need it, and a replay
    # served from the cache is put back (it is then the most recently used).
    size: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        headers = sum(len(name) + len(value) for name, value in self.response.headers)
        object.__setattr__(
            self, "size", ENTRY_OVERHEAD + headers + len(self.response.body)
        )


class ReceiptCache:
    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._bytes = 0
        self._entries: OrderedDict[tuple[str, str], SettledReplay] = OrderedDict()

    def get(
        self, tenant_id: str, operation_key: str, *, now: datetime
    ) -> SettledReplay | None:
        key = (tenant_id, operation_key)
        entry = self._entries.get(key)
        if entry is None:
            return None
        if now >= entry.prunable_at:
            del self._entries[key]
            self._bytes -= entry.size
            return None
        self._entries.move_to_end(key)
        return entry

    def put(self, entry: SettledReplay) -> None:
        if entry.size > self._max_bytes // 8:
            return  # one large body must not evict everything else
        key = (entry.effect.tenant_id, entry.effect.operation_key)
        previous = self._entries.pop(key, None)
        if previous is not None:
            self._bytes -= previous.size
        self._entries[key] = entry
        self._bytes += entry.size
        while self._bytes > self._max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.size

    def holds(self, effect: Effect) -> bool:
        """This very effect is what the cache answers its key with."""
        entry = self._entries.get((effect.tenant_id, effect.operation_key))
        return entry is not None and entry.effect is effect

    def __len__(self) -> int:
        return len(self._entries)


def prunable_at(effect: Effect, ledger_retention: timedelta) -> datetime:
    """The first moment the ledger may prune a settled effect (``prune_settled``)."""
    at = effect.updated_at + ledger_retention
    if effect.retention_deadline is not None:
        at = max(at, effect.retention_deadline)
    return at


def cached(
    receipts: ReceiptCache, tenant: str, operation_key: str, fingerprint: str
) -> Outcome | None:
    """The outcome of a retry of a settled effect this process replayed before, without
    the ledger: its receipt, or a conflict if the key was bound to another payload."""
    entry = receipts.get(tenant, operation_key, now=datetime.now(UTC))
    if entry is None:
        return None
    if entry.effect.request_hash != fingerprint:
        return Conflict(entry.effect)
    return Replayed(entry.effect, entry.response, entry.source)


def noted(
    receipts: ReceiptCache, metrics: Metrics, route: Route, outcome: Outcome
) -> Outcome:
    """``outcome`` on ``route``, counted, and kept in the cache if it is a replay (so
    the next retry of it is answered from memory; one answered from there already is)."""
    if isinstance(outcome, Replayed):
        metrics.of_route(route.name).replays.inc()
        if not receipts.holds(outcome.effect):
            receipts.put(
                SettledReplay(
                    outcome.effect,
                    outcome.response,
                    outcome.source,
                    prunable_at(outcome.effect, route.contract.ledger_retention),
                )
            )
    elif isinstance(outcome, Conflict):
        metrics.conflicts.labels(route.name).inc()
    return outcome
