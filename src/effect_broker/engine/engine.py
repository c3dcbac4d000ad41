"""The engine: the one place that decides what happens to an effect and writes it down.

Three adapters use it and none of them touches the ledger itself:

* the request path ``submit``s an intent: reserve it (bound to its payload hash), then
  carry out ``policy.decide`` until there is something to answer;
* the reconciler ``claim_due``s overdue effects and ``settle``s each one with the same
  policy, as their owner;
* the admin API asks it to ``reconcile_now`` or to apply an operator's ``resolve``.

This module strings the work together; the parts live beside it. ``policy.decide``
says what to do next with an effect as the ledger has it; ``steps`` does it: the
dispatcher gathers evidence at the target (``dispatch``), ``rulings.rule`` turns that
evidence (or a lapsed lease, a spent retry limit, an operator's resolution) into the
next state, and the recorder writes it through the ``Ledger`` port (``recorder``).
Lease lengths and send windows come from ``leases``.

Every write is a compare-and-swap on the effect's version. A write that loses the race
ends the work as ``Busy``: whoever moved the effect first owns it now.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from effect_broker import failpoints
from effect_broker.canonical import downstream_key
from effect_broker.config.contracts import Contract, Route
from effect_broker.engine import resolution
from effect_broker.engine.evidence import Resolved, RetriesSpent
from effect_broker.engine.leases import Leases
from effect_broker.engine.messages import StoredRequest
from effect_broker.engine.policy import DEFAULT_RETRY_AFTER, Verdict, decide
from effect_broker.engine.recorder import Recorder
from effect_broker.engine.resolution import ResolutionRequest
from effect_broker.engine.results import (
    Answered,
    Busy,
    Conflict,
    Outcome,
    Replayed,
    Unknowable,
    Unknown,
)
from effect_broker.engine.rulings import FENCED_RETRY
from effect_broker.engine.sealed import open_receipt, open_request, seal_request
from effect_broker.engine.slots import UpstreamSlots
from effect_broker.engine.steps import Steps
from effect_broker.engine.wiring import Wiring
from effect_broker.errors import (
    StaleVersion,
    StoreError,
)
from effect_broker.models import (
    AttemptTerms,
    Effect,
    EffectStatus,
    ReservationOutcome,
    SafetyClass,
)

log = logging.getLogger("effect_broker.engine")

MISCONFIGURED_RETRY = timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class Intent:
    """One request on a matched route, as the client sent it (before secrets)."""

    tenant: str
    operation_key: str
    request_hash: str
    route: Route
    request: StoredRequest
    preview: Mapping[str, Any]
    # How long a duplicate may wait for the request in flight: the client's
    # ``Prefer: wait=N``, else (None) the contract's ``in_flight_wait``.
    wait: timedelta | None = None


class Engine:
    def __init__(self, wiring: Wiring, *, owner: str) -> None:
        self.wiring = wiring
        self.owner = owner
        self._store = wiring.store
        self._keyring = wiring.keyring
        self._routes = {route.name: route for route in wiring.config.routes}
        self._leases = Leases(wiring.slots.queue_timeout, wiring.lease_grace)
        self._recorder = Recorder(wiring, owner=owner)
        self._steps = Steps(wiring, self._leases, self._recorder)

    def with_owner(self, owner: str, *, slots: UpstreamSlots | None = None) -> Engine:
        """The same engine writing under another name (the reconciler's, say), with
        its own budget of upstream connections when ``slots`` is given."""
        wiring = self.wiring if slots is None else replace(self.wiring, slots=slots)
        return Engine(wiring, owner=owner)

    def lease_for(self, contract: Contract) -> timedelta:
        return self._leases.lease_for(contract)

    # -- the request path ---------------------------------------------------------------

    async def submit(self, intent: Intent) -> Outcome:
        """Record the intent once per (tenant, operation key), then act on it."""
        route, contract = intent.route, intent.route.contract
        effect_id = uuid.uuid4()
        sealed = seal_request(self._keyring, intent.tenant, effect_id, intent.request)
        window = self._leases.window_for(contract)  # before the lease is asked for
        wait = contract.in_flight_wait if intent.wait is None else intent.wait
        wait_until = time.monotonic() + wait.total_seconds()
        failpoints.hit(failpoints.BEFORE_RESERVE_COMMIT)
        reservation = await self._store.reserve(
            tenant_id=intent.tenant,
            operation_key=intent.operation_key,
            request_hash=intent.request_hash,
            route=route.name,
            contract_name=contract.name,
            contract_version=contract.version,
            safety=contract.safety,
            downstream_key=downstream_key(
                self._keyring.tenant_hmac_key(intent.tenant),
                intent.tenant,
                intent.operation_key,
            ),
            request_ciphertext=sealed,
            request_preview=intent.preview,
            owner=self.owner,
            lease=self.lease_for(contract),
            effect_id=effect_id,
            start=_start_terms(contract),
        )
        failpoints.hit(failpoints.AFTER_RESERVE)
        effect = reservation.effect
        if reservation.outcome is ReservationOutcome.CONFLICT:
            return Conflict(effect)
        if reservation.outcome is ReservationOutcome.REPLAY:
            if reservation.receipt is not None:
                receipt = reservation.receipt
                response = open_receipt(self._keyring, receipt, effect)
                return Replayed(effect, response, receipt.source)
            return await self._fenced(
                self._advance(
                    effect,
                    route,
                    intent.request,
                    seen_at=reservation.observed_at,
                    wait_until=wait_until,
                ),
                effect,
            )
        if effect.status is EffectStatus.DISPATCHING:
            # Reserved and started in one commit: ours to send now.
            return await self._fenced(
                self._steps.send(effect, route, intent.request, window), effect
            )
        return await self._fenced(
            self._advance(
                effect,
                route,
                intent.request,
                owned=True,
                seen_at=reservation.observed_at,
            ),
            effect,
        )

    # -- the reconciler -----------------------------------------------------------------

    async def claim_due(self, *, lease: timedelta, limit: int) -> list[Effect]:
        """Lease overdue effects to this engine's owner (``FOR UPDATE SKIP LOCKED``)."""
        return await self._store.claim_due(owner=self.owner, lease=lease, limit=limit)

    async def settle(self, effect: Effect) -> Outcome:
        """Move one claimed effect as far as the proof allows."""
        route = self._pinned_route(effect)
        if route is None:
            effect = await self._recorder.reschedule(
                effect,
                MISCONFIGURED_RETRY,
                error=f"route {effect.route} with contract {effect.contract_name}@"
                f"{effect.contract_version} is not in the running configuration",
            )
            return Unknown(effect, Unknowable.AWAITING_OPERATOR, effect.last_error or "")
        outcome = await self._fenced(
            self._advance(effect, route, None, owned=True), effect
        )
        if isinstance(outcome, Answered) and outcome.attempt.stream is not None:
            # Nobody to pass a streamed answer on to: read it to its end and settle.
            ended = await outcome.attempt.stream.discard()
            return dataclasses.replace(outcome, effect=ended.effect)
        return outcome

    async def prune_settled(self, *, limit: int) -> int:
        """Delete up to ``limit`` settled effects past their contract's
        ``ledger_retention``; unknown, manual-review and every other unsettled effect
        stay. Returns how many left the ledger."""
        retention = {
            contract.name: contract.ledger_retention
            for contract in self.wiring.config.contracts.values()
        }
        if not retention:
            return 0
        routes = await self._store.prune_settled(retention, limit=limit)
        for route in routes:
            self.wiring.metrics.pruned.labels(route).inc()
        return len(routes)

    # -- the operator -------------------------------------------------------------------

    async def reconcile_now(self, effect: Effect, *, actor: str) -> Effect:
        """Make the reconciler look at an effect at its next pass, where it can act."""
        resolution.check_reconcilable(effect)
        return await self._recorder.reschedule(effect, timedelta(0), actor=actor)

    async def resolve(
        self, effect: Effect, request: ResolutionRequest, *, actor: str
    ) -> Effect:
        """Apply an operator's resolution; reason and evidence go into the history."""
        _, resolved = await self._steps.apply(
            effect, None, Resolved(request), actor=actor
        )
        return resolved

    # -- carrying out the policy --------------------------------------------------------

    async def _advance(
        self,
        effect: Effect,
        route: Route,
        request: StoredRequest | None,
        *,
        owned: bool = False,
        seen_at: datetime | None = None,
        wait_until: float | None = None,
    ) -> Outcome:
        """Carry out the policy until there is something to answer.

        Every decision is made on the database's clock, never this process's: the
        latest time the ledger stamped on what was read or written (``seen_at`` for a
        read that changed nothing, else the row's ``updated_at``). Leases and deadlines
        are the database's times too, so two proxies with skewed clocks still agree on
        when a lease has run out.

        A duplicate of a request in flight waits, until ``wait_until`` on the monotonic
        clock, for the effect to move, then decides again (a replay, once it settled).
        """
        contract = route.contract
        upstream_seconds = 0.0
        while True:
            now = max(seen_at or effect.updated_at, effect.updated_at)
            decision = decide(effect, contract, now, owned=owned)
            verdict, reason = decision.verdict, decision.reason
            if verdict is Verdict.REPLAY:
                receipt = await self._store.receipt(effect.tenant_id, effect.effect_id)
                if receipt is None:  # settled rows always have one; be loud if not
                    raise StoreError(f"settled effect {effect.effect_id} has no receipt")
                response = open_receipt(self._keyring, receipt, effect)
                outcome: Outcome = Replayed(effect, response, receipt.source)
            elif verdict is Verdict.IN_FLIGHT:
                assert decision.retry_after is not None
                left = 0.0 if wait_until is None else wait_until - time.monotonic()
                if left > 0:
                    moved = await self.wiring.waiters.wait(effect, left)
                    if moved is not None:
                        effect = await self._store.get(effect.tenant_id, effect.effect_id)
                        seen_at = moved.observed_at or seen_at
                        continue
                outcome = Busy(
                    effect,
                    reason,
                    self._until_attempt_ends(decision.retry_after, contract),
                )
            elif verdict is Verdict.WAIT_SETTLEMENT:
                if owned:
                    effect = await self._release(effect, decision.retry_after)
                outcome = Unknown(
                    effect, Unknowable.SETTLING, reason, decision.retry_after
                )
            elif verdict is Verdict.AWAIT_OPERATOR:
                if owned:
                    effect = await self._release(effect, None)
                outcome = Unknown(effect, Unknowable.AWAITING_OPERATOR, reason)
            elif verdict is Verdict.REVIEW:
                effect, outcome = await self._steps.to_review(effect, contract, reason)
            elif verdict is Verdict.GIVE_UP:
                _, effect = await self._steps.apply(effect, contract, RetriesSpent())
                owned = True
                continue
            elif verdict is Verdict.EXPIRE_LEASE:
                effect, owned = await self._steps.take_over(effect, contract), True
                continue
            elif verdict in (Verdict.PROBE, Verdict.LOOKUP):
                # A probe (reconcilable) or the kit's lookup (transactional).
                step = await self._steps.ask(
                    effect,
                    route,
                    stored_url=(request or open_request(self._keyring, effect)).url,
                )
                effect, owned = step.effect, True
                upstream_seconds += step.elapsed
                if step.outcome is None:
                    continue  # settled (replay it), requeued, or proven absent
                outcome = step.outcome
            else:
                after_unknown = effect.status is EffectStatus.OUTCOME_UNKNOWN
                window = self._leases.window_for(contract)  # before the lease
                effect = await self._recorder.start(
                    effect, contract, self.lease_for(contract)
                )
                outcome = await self._steps.send(
                    effect,
                    route,
                    request or open_request(self._keyring, effect),
                    window,
                    after_unknown=after_unknown,
                )
            return dataclasses.replace(
                outcome, upstream_seconds=outcome.upstream_seconds + upstream_seconds
            )

    async def _fenced(self, work: Awaitable[Outcome], effect: Effect) -> Outcome:
        """Run ``work``; losing a compare-and-swap means someone else owns the effect.
        Either way the work on it is over for now: duplicates waiting here look again."""
        try:
            return await work
        except StaleVersion:
            return Busy(
                effect,
                "being handled by another request or worker right now",
                FENCED_RETRY,
            )
        finally:
            self.wiring.waiters.notify(effect.effect_id)

    def _until_attempt_ends(self, lease_left: timedelta, contract: Contract) -> timedelta:
        """When to come back to an effect in flight: when its attempt's timeout runs out,
        counted from its start (the lease without the queue wait and the grace), not
        when its lease does; a duplicate that comes back earlier waits again."""
        margin = self.lease_for(contract) - contract.timeout
        return max(DEFAULT_RETRY_AFTER, lease_left - margin)

    async def _release(self, effect: Effect, delay: timedelta | None) -> Effect:
        """Let go of an owned effect; ``delay=None``: due for nobody but a person."""
        return await self._recorder.reschedule(effect, delay)

    def _pinned_route(self, effect: Effect) -> Route | None:
        route = self._routes.get(effect.route)
        if route is None:
            return None
        pinned = (effect.contract_name, effect.contract_version)
        for bound in route.bound_routes():  # an MCP route: one per tool contract
            if (bound.contract.name, bound.contract.version) == pinned:
                return bound
        return None


def _start_terms(contract: Contract) -> AttemptTerms | None:
    """Reserve and start a new effect in one commit where a crash before sending is
    settled anyway: by a resend (idempotent), a lookup (reconcilable), or the kit's
    lookup and tombstone of the first attempt's key (transactional).

    For an unsafe target the two commits stay apart: if this process dies between them,
    PREPARED proves nothing was sent, so the retry may still send it.
    """
    if contract.safety is SafetyClass.UNSAFE:
        return None
    return AttemptTerms(contract.key_retention, contract.settlement_bound)
