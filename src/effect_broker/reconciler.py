"""The reconciler: every effect whose outcome was lost is settled by proof, or shown.

It claims due effects with the store's ``FOR UPDATE SKIP LOCKED`` claim, so any number of
reconcilers can share one ledger without working on the same effect at once, and every
write it makes is fenced by the effect's version. Per safety class (DESIGN.md):

* a dispatch whose lease expired (its proxy died mid-flight) becomes OUTCOME_UNKNOWN;
* idempotent: sent again with the same key while ``first dispatch + key_retention`` is
  ahead; after that, or past the retry limit, an operator decides (MANUAL_REVIEW);
* reconcilable: once the settlement bound has passed, looked up; found settles it with
  the lookup's receipt, a conclusive absence requeues and sends it, anything else
  leaves it unknown with backoff;
* unsafe: never sent again. It stays OUTCOME_UNKNOWN, counted in the metrics, until an
  operator resolves it with evidence.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime, timedelta

from effect_broker.config.contracts import Route
from effect_broker.engine.dispatch import Dispatcher, outgoing_request
from effect_broker.engine.messages import StoredRequest, StoredResponse, decode_request
from effect_broker.errors import DecryptionError, EffectBrokerError, StaleVersion
from effect_broker.models import Effect, EffectStatus, ReceiptSource, SafetyClass
from effect_broker.proxy.state import ProxyState
from effect_broker.runtime import worker_name

log = logging.getLogger("effect_broker.reconciler")

LEASE = timedelta(seconds=30)
MISCONFIGURED_RETRY = timedelta(minutes=5)


class Reconciler:
    def __init__(
        self,
        state: ProxyState,
        *,
        batch: int = 20,
        idle_seconds: float = 1.0,
        owner: str | None = None,
    ) -> None:
        self.state = state
        self.batch = batch
        self.idle_seconds = idle_seconds
        self.owner = owner or worker_name("reconciler")
        self.dispatcher = Dispatcher(
            store=state.store,
            keyring=state.keyring,
            session=state.session,
            owner=self.owner,
            max_receipt_bytes=state.max_receipt_bytes,
            metrics=state.metrics,
            lease_grace=state.lease_grace,
        )
        self._routes = {route.name: route for route in state.config.routes}

    async def run(self, stop: asyncio.Event) -> None:
        """Claim and settle until ``stop`` is set; idle briefly when nothing is due."""
        log.info("reconciler %s started", self.owner)
        while not stop.is_set():
            try:
                settled = await self.run_once()
            except EffectBrokerError as exc:
                log.warning("reconciler pass failed: %s", exc.message)
                settled = 0
            if settled == 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.idle_seconds)
        log.info("reconciler %s stopped", self.owner)

    async def run_once(self) -> int:
        """One claim and the work on what it returned; the number of effects handled."""
        claimed = await self.state.store.claim_due(
            owner=self.owner, lease=LEASE, limit=self.batch
        )
        for effect in claimed:
            try:
                await self.settle(effect)
            except StaleVersion:
                log.info(
                    "effect %s moved on under us; left to its new owner", effect.effect_id
                )
            except EffectBrokerError as exc:
                log.warning("effect %s: %s", effect.effect_id, exc.message)
        return len(claimed)

    async def settle(self, effect: Effect) -> Effect:
        """Move one claimed effect as far as the proof allows."""
        route = self._route_for(effect)
        if route is None:
            return await self.state.store.reschedule(
                effect,
                delay=MISCONFIGURED_RETRY,
                actor=self.owner,
                error=f"route {effect.route} with contract {effect.contract_name}@"
                f"{effect.contract_version} is not in the running configuration",
            )
        if effect.status in (EffectStatus.DISPATCHING, EffectStatus.RECONCILING):
            effect = await self.state.store.transition(
                effect,
                EffectStatus.OUTCOME_UNKNOWN,
                kind="lease_expired",
                actor=self.owner,
                error=f"its worker stopped while it was {effect.status}; who held it "
                "is in the claim event's previous_owner",
                # Still ours until the lease runs out, so a crash right after this
                # write leaves the effect due, never stranded with nothing scheduled.
                lease_owner=self.owner,
                lease=LEASE,
                settle_within=route.contract.settlement_bound,
            )
            log.warning(
                "effect %s on %s: holder died mid-flight; outcome unknown",
                effect.effect_id,
                effect.route,
            )
        if effect.status is EffectStatus.PREPARED:
            return await self._dispatch(effect, route)
        if effect.status is EffectStatus.RETRYABLE:
            if effect.attempts >= route.contract.retry_limit:
                return await self._give_up(effect)
            return await self._dispatch(effect, route)
        if effect.status is EffectStatus.OUTCOME_UNKNOWN:
            return await self._settle_unknown(effect, route)
        return await self.state.store.reschedule(effect, delay=None, actor=self.owner)

    async def _settle_unknown(self, effect: Effect, route: Route) -> Effect:
        contract = route.contract
        now = datetime.now(UTC)
        if effect.safety is SafetyClass.IDEMPOTENT:
            if effect.retention_deadline is None or now >= effect.retention_deadline:
                return await self._to_review(
                    effect,
                    "the target's key retention has passed; resending could charge twice",
                )
            if effect.attempts >= contract.retry_limit:
                return await self._to_review(effect, "the retry limit is spent")
            return await self._dispatch(effect, route)
        if effect.safety is SafetyClass.RECONCILABLE:
            if (
                effect.settlement_deadline is not None
                and now < effect.settlement_deadline
            ):
                return await self.state.store.reschedule(
                    effect, delay=effect.settlement_deadline - now, actor=self.owner
                )
            probed = await self.dispatcher.probe(
                effect,
                route,
                stored_url=self._stored_request(effect).url,
                injected=self.state.injected,
            )
            if probed.effect.status is not EffectStatus.PREPARED:
                return probed.effect
            if probed.effect.attempts >= contract.retry_limit:
                return probed.effect  # requeued; the next pass dispatches or gives up
            return await self._dispatch(probed.effect, route)
        # Unsafe: nothing here can prove what happened. Release it, due for nobody.
        return await self.state.store.reschedule(effect, delay=None, actor=self.owner)

    async def _dispatch(self, effect: Effect, route: Route) -> Effect:
        outgoing = outgoing_request(
            route,
            self._stored_request(effect),
            effect.downstream_key,
            self.state.injected,
        )
        dispatched = await self.dispatcher.dispatch(effect, route.contract, outgoing)
        dispatched.attempt.release()
        log.info(
            "effect %s on %s: redispatched, now %s",
            effect.effect_id,
            effect.route,
            dispatched.effect.status,
        )
        return dispatched.effect

    async def _to_review(self, effect: Effect, why: str) -> Effect:
        log.warning(
            "effect %s on %s: manual review (%s)", effect.effect_id, effect.route, why
        )
        return await self.state.store.transition(
            effect,
            EffectStatus.MANUAL_REVIEW,
            kind="manual_review",
            actor=self.owner,
            error=why,
        )

    async def _give_up(self, effect: Effect) -> Effect:
        """Out of attempts, each of which provably sent nothing: final, and said so."""
        body = (
            b'{"error": "effect-broker gave up: the target could not be reached on any '
            b'attempt, so nothing was sent"}'
        )
        response = StoredResponse(
            502, "Bad Gateway", [("Content-Type", "application/json")], body
        )
        return await self.dispatcher.record_receipt(
            effect, EffectStatus.FAILED_FINAL, response, source=ReceiptSource.PROXY
        )

    def _route_for(self, effect: Effect) -> Route | None:
        route = self._routes.get(effect.route)
        if route is None:
            return None
        pinned = (effect.contract_name, effect.contract_version)
        if (route.contract.name, route.contract.version) != pinned:
            return None
        return route

    def _stored_request(self, effect: Effect) -> StoredRequest:
        if effect.request_ciphertext is None:
            raise DecryptionError(f"effect {effect.effect_id} has no stored request")
        plaintext = self.state.keyring.decrypt(
            tenant_id=effect.tenant_id,
            effect_id=str(effect.effect_id),
            kind="request",
            blob=effect.request_ciphertext,
        )
        return decode_request(plaintext)
