"""The reconciler: every effect whose outcome was lost is settled by proof, or shown.

It claims due effects with the store's ``FOR UPDATE SKIP LOCKED`` claim, so any number of
reconcilers can share one ledger without working on the same effect at once, and hands
each one to the engine, which decides with the same policy the request path uses
(``engine.policy``). Per safety class (docs/architecture.md):

* a dispatch whose lease expired (its proxy died mid-flight) becomes OUTCOME_UNKNOWN;
* idempotent: sent again with the same key while ``first dispatch + key_retention`` is
  ahead; after that, or past the retry limit, an operator decides (MANUAL_REVIEW);
* reconcilable: once the settlement bound has passed, looked up; found settles it with
  the lookup's receipt, a conclusive absence requeues and sends it, anything else
  leaves it unknown with backoff;
* transactional: the attempt is looked up by its attempt key at once; committed settles
  it with the answer the attempt committed with, absent is tombstoned, and a tombstone
  that holds proves the attempt never commits, so the effect is retryable (the next
  attempt under the next key, within the retry limit); no proof leaves it unknown;
* unsafe: never sent again. It stays OUTCOME_UNKNOWN, counted in the metrics, until an
  operator resolves it with evidence.

Every ``prune_seconds`` it also prunes settled effects past their contract's
``ledger_retention``, in bounded batches (``Engine.prune_settled``), so the ledger
stays small; unsettled effects (unknown, manual review, in flight) are never pruned.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

from effect_broker.engine import Busy, Engine, worker_name
from effect_broker.errors import EffectBrokerError
from effect_broker.ratelimited_log import RateLimitedLog
from effect_broker.tracing import links_to, tracer

log = logging.getLogger("effect_broker.reconciler")
quiet = RateLimitedLog(log)

LEASE = timedelta(seconds=30)


class Reconciler:
    def __init__(
        self,
        engine: Engine,
        *,
        batch: int = 20,
        idle_seconds: float = 1.0,
        owner: str | None = None,
        prune_seconds: float = 60.0,
        prune_batch: int = 500,
        prune_batches: int = 20,
    ) -> None:
        self.engine = engine.with_owner(
            owner or worker_name("reconciler"), slots=engine.wiring.reconciler_slots
        )
        self.owner = self.engine.owner
        self.batch = batch
        self.idle_seconds = idle_seconds
        self.prune_seconds = prune_seconds
        self.prune_batch = prune_batch
        self.prune_batches = prune_batches

    async def run(self, stop: asyncio.Event) -> None:
        """Claim and settle until ``stop`` is set; idle briefly when nothing is due."""
        log.info("reconciler %s started", self.owner)
        loop = asyncio.get_running_loop()
        next_prune = loop.time()
        while not stop.is_set():
            try:
                settled = await self.run_once()
                if loop.time() >= next_prune:
                    next_prune = loop.time() + self.prune_seconds
                    await self.prune_once()
            except EffectBrokerError as exc:
                # Every idle second fails the same way while the ledger is down.
                quiet.warning(
                    f"pass:{type(exc).__name__}",
                    "reconciler pass failed: %s",
                    exc.message,
                )
                settled = 0
            if settled == 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.idle_seconds)
        log.info("reconciler %s stopped", self.owner)

    async def run_once(self) -> int:
        """One claim and the work on what it returned; the number of effects handled."""
        claimed = await self.engine.claim_due(lease=LEASE, limit=self.batch)
        for effect in claimed:
            try:
                with tracer.start_as_current_span(
                    f"reconcile {effect.route}",
                    links=links_to(effect.request_preview.get("trace")),
                    attributes={
                        "effect_broker.route": effect.route,
                        "effect_broker.effect_id": str(effect.effect_id),
                        "effect_broker.status": effect.status.value,
                    },
                ):
                    outcome = await self.engine.settle(effect)
            except EffectBrokerError as exc:
                log.warning("effect %s: %s", effect.effect_id, exc.message)
                continue
            if isinstance(outcome, Busy):
                log.info(
                    "effect %s moved on under us; left to its new owner", effect.effect_id
                )
            else:
                log.info(
                    "effect %s on %s: now %s",
                    effect.effect_id,
                    effect.route,
                    outcome.effect.status,
                )
        # The heartbeat an alert watches: set only by a pass whose claim reached the
        # ledger, so a reconciler that is stuck or cut off from it goes quiet.
        self.engine.wiring.metrics.reconciler_heartbeat.set_to_current_time()
        return len(claimed)

    async def prune_once(self) -> int:
        """Prune settled effects past retention: batches of ``prune_batch``, at most
        ``prune_batches`` of them, so one pass never holds the ledger for long."""
        pruned = 0
        for _ in range(self.prune_batches):
            deleted = await self.engine.prune_settled(limit=self.prune_batch)
            pruned += deleted
            if deleted < self.prune_batch:
                break
        if pruned:
            log.info("pruned %d settled effects past their ledger retention", pruned)
        return pruned
