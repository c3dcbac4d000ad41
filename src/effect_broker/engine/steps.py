"""The engine's steps that involve the target: gather evidence, rule, write, answer.

Every step has the same shape, so none of them can decide anything by itself: the
dispatcher brings evidence back from the target (``dispatch``), ``rulings.rule`` says
what it proves and where the effect goes, the recorder writes that through the ledger
port (``recorder``), and ``next_state.outcome_of`` says what the caller is told. The
steps are an attempt (from its committed start to its recorded answer, a streamed one
included), a probe, a kit's lookup, and the evidence-only moves ``policy.decide``
calls for (a lapsed lease, a spent retry limit, manual review) or an operator brings.
``engine.Engine`` strings them together; this module keeps each step whole.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, replace

from effect_broker.config.contracts import Contract, Route
from effect_broker.engine.dispatch import Dispatcher, Sent
from effect_broker.engine.evidence import (
    Asking,
    Attempted,
    Evidence,
    LeaseLapsed,
    PastAutomation,
)
from effect_broker.engine.fence import SendWindow
from effect_broker.engine.leases import Leases
from effect_broker.engine.messages import StoredRequest
from effect_broker.engine.next_state import Ruling, Then, outcome_of
from effect_broker.engine.recorder import Recorder
from effect_broker.engine.results import Answered, Outcome, Unknowable, Unknown
from effect_broker.engine.rulings import rule
from effect_broker.engine.stream import Ending, RecordedStream
from effect_broker.engine.targets import outgoing_request, wire_key
from effect_broker.engine.upstream import AttemptResult, Delivery
from effect_broker.engine.wiring import Wiring
from effect_broker.errors import StoreError, StoreUnavailable
from effect_broker.models import Effect, SafetyClass
from effect_broker.state_machine import TERMINAL

log = logging.getLogger("effect_broker.engine")


@dataclass(frozen=True, slots=True)
class Step:
    """Where a step left the effect, what to answer (None: the policy decides again
    on the new row), and the seconds it spent waiting on the target."""

    effect: Effect
    outcome: Outcome | None
    elapsed: float = 0.0


class Steps:
    def __init__(self, wiring: Wiring, leases: Leases, recorder: Recorder) -> None:
        self._wiring = wiring
        self._leases = leases
        self._recorder = recorder
        self._dispatcher = Dispatcher(wiring)
        self._rng = random.Random()

    async def apply(
        self,
        effect: Effect,
        contract: Contract | None,
        evidence: Evidence,
        *,
        actor: str | None = None,
    ) -> tuple[Ruling, Effect]:
        """Rule on ``evidence`` and write the ruling (the start of an attempt, a lease
        renewal and a reschedule are the recorder's other writes)."""
        ruling = rule(effect, contract, evidence, rng=self._rng)
        return ruling, await self._recorder.write(effect, ruling, actor=actor)

    async def take_over(self, effect: Effect, contract: Contract) -> Effect:
        """Its holder died mid-flight: the outcome is unknown, and now it is ours."""
        log.warning(
            "effect %s on %s: holder %s died while it was %s; outcome unknown",
            effect.effect_id,
            effect.route,
            effect.lease_owner,
            effect.status,
        )
        lapsed = LeaseLapsed(self._leases.lease_for(contract))
        return (await self.apply(effect, contract, lapsed))[1]

    async def to_review(
        self, effect: Effect, contract: Contract, why: str
    ) -> tuple[Effect, Outcome]:
        """Nothing automatic may settle it any more: a person decides."""
        log.warning(
            "effect %s on %s: manual review (%s)", effect.effect_id, effect.route, why
        )
        ruling, effect = await self.apply(effect, contract, PastAutomation(why))
        outcome = outcome_of(ruling, effect)
        assert outcome is not None, "manual review is always answered"
        return effect, outcome

    # -- an attempt -------------------------------------------------------------------

    async def send(
        self,
        effect: Effect,
        route: Route,
        request: StoredRequest,
        window: SendWindow,
        *,
        after_unknown: bool = False,
    ) -> Outcome:
        """Send an effect held in DISPATCHING (attempt and lease committed, ``window``
        taken before the lease was asked for) and record what the attempt proved.

        ``request`` is the request as recorded (as the client sent it, or the ledger's
        sealed copy when the reconciler resends). From here on bytes may reach the
        target: if the ledger cannot record the answer, the outcome is unknown, never
        "nothing was sent".
        """
        try:
            return await self._send(effect, route, request, window, after_unknown)
        except (StoreUnavailable, StoreError) as exc:
            log.warning("effect %s: sent, answer not recorded: %s", effect.effect_id, exc)
            return Unknown(
                effect,
                Unknowable.LOST,
                f"the request was sent, but the ledger could not record the answer "
                f"({exc.message}); the reconciler settles it once the database is back",
            )

    async def _send(
        self,
        effect: Effect,
        route: Route,
        request: StoredRequest,
        window: SendWindow,
        after_unknown: bool,
    ) -> Outcome:
        outgoing = outgoing_request(
            route,
            request,
            wire_key(effect),
            self._wiring.injected,
            self._wiring.protocols.get(route.name),
        )
        contract = route.contract
        sent = await self._dispatcher.send(
            effect, contract, outgoing, window, after_unknown=after_unknown
        )
        attempt = sent.evidence.attempt
        if attempt.live is not None:
            stream = self._recorded_stream(effect, contract, sent, window)
            # Answered now; the stream settles the effect when its body ends.
            live = replace(attempt, stream=stream)
            return Answered(effect, live, upstream_seconds=attempt.elapsed)
        try:
            ruling, settled = await self._record_attempt(effect, contract, sent.evidence)
        except BaseException:
            attempt.release()
            raise
        if ruling.then is Then.UNKNOWN:
            attempt.release()
        outcome = outcome_of(ruling, settled, attempt)
        assert outcome is not None, "an attempt's ruling always has an answer"
        return outcome

    async def _record_attempt(
        self, effect: Effect, contract: Contract, evidence: Attempted
    ) -> tuple[Ruling, Effect]:
        ruling, settled = await self.apply(effect, contract, evidence)
        if settled.status not in TERMINAL:  # a receipt's settlement counts itself
            metrics = self._wiring.metrics
            metrics.count(metrics.effects, settled.route, settled.status.value)
        return ruling, settled

    def _recorded_stream(
        self, effect: Effect, contract: Contract, sent: Sent, window: SendWindow
    ) -> RecordedStream:
        """The open answer of unknown length, to be passed on while it arrives and
        settled when it ends (``engine.stream``); the slot is given back then."""
        head = sent.evidence.attempt
        assert head.live is not None and head.response is not None
        renew_lease = self._leases.streaming_lease(contract)

        async def renew(current: Effect) -> Effect:
            return await self._recorder.renew(current, renew_lease)

        async def settle(current: Effect, ending: Ending) -> Effect:
            evidence = replace(sent.evidence, attempt=_attempt_of(head, ending))
            try:
                _, settled = await self._record_attempt(current, contract, evidence)
            finally:  # the stream's end is the work's end: duplicates look again
                self._wiring.waiters.notify(current.effect_id)
            return settled

        return RecordedStream(
            effect,
            head.response,
            head.live,
            idle_timeout=contract.idle_timeout.total_seconds(),
            max_body=self._wiring.max_receipt_bytes,
            settle=settle,
            renew=renew,
            release=sent.slot.aclose,
            # The lease cannot end before the window closes plus the grace.
            lease_ends_in=window.closes_at
            + self._leases.grace_for(contract).total_seconds()
            - time.monotonic(),
            renew_lease=renew_lease.total_seconds(),
        )

    # -- asking the target ------------------------------------------------------------

    async def ask(self, effect: Effect, route: Route, *, stored_url: str) -> Step:
        """Probe a reconcilable target, or look a transactional attempt up (and
        tombstone it when absent), holding the effect in RECONCILING meanwhile; then
        write what the answer proves. ``stored_url`` locates the target."""
        contract = route.contract
        asking = Asking(self._leases.lease_for(contract))
        _, effect = await self.apply(effect, contract, asking)
        if effect.safety is SafetyClass.TRANSACTIONAL:
            asked = await self._dispatcher.look_up(effect, route, stored_url=stored_url)
        else:
            asked = await self._dispatcher.probe(effect, route, stored_url=stored_url)
        ruling, effect = await self.apply(effect, contract, asked.evidence)
        return Step(effect, outcome_of(ruling, effect), asked.elapsed)


def _attempt_of(head: AttemptResult, ending: Ending) -> AttemptResult:
    """What a streamed attempt proved once its body ended: the whole answer, or, when
    the body broke off or went quiet, an unknown outcome (the target may have acted)."""
    elapsed = head.elapsed + ending.elapsed
    if not ending.complete:
        return AttemptResult(
            Delivery.UNKNOWN, detail=ending.detail, elapsed=elapsed, timed_out=ending.idle
        )
    return AttemptResult(
        Delivery.ANSWERED,
        ending.response,
        elapsed=elapsed,
        body_omitted=ending.omitted,
    )
