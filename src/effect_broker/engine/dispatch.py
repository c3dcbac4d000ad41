"""One dispatch or lookup of a recorded effect, and the receipt it leaves.

The engine's hands: it commits DISPATCHING and the attempt before any byte leaves, sends
once, then writes what the answer proves; it probes a reconcilable target and writes what
the lookup proves; it looks a transactional target's attempt up (tombstoning it when
absent) and writes that proof; it seals and stores every receipt (target, probe, kit
lookup, operator, or the proxy giving up). Every write is fenced by the effect's version.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from effect_broker import failpoints
from effect_broker.config.contracts import Contract, Route
from effect_broker.engine.fence import SendWindow
from effect_broker.engine.follow import followed
from effect_broker.engine.lookup import (
    Finding,
    Kit,
    KitAnswer,
    current_attempt_key,
    status_after_transactional_answer,
)
from effect_broker.engine.messages import StoredRequest, StoredResponse
from effect_broker.engine.outcomes import (
    backoff,
    next_look_when_unknown,
    status_after_answer,
)
from effect_broker.engine.policy import INSIDE_THE_PROXY
from effect_broker.engine.probe import ProbeResult, ProbeVerdict, run_probe
from effect_broker.engine.protocol import CutsShort, Follows, TargetProtocol
from effect_broker.engine.sealed import seal_response
from effect_broker.engine.slots import NoFreeSlot
from effect_broker.engine.stream import Ending, RecordedStream
from effect_broker.engine.targets import base_url, well_known_origin
from effect_broker.engine.upstream import AttemptResult, Delivery, send
from effect_broker.engine.wiring import Wiring
from effect_broker.headers import upstream_request_headers
from effect_broker.models import Effect, EffectStatus, ReceiptSource, SafetyClass
from effect_broker.state_machine import TERMINAL

log = logging.getLogger("effect_broker.engine")

TRUNCATED_HEADER = "Effect-Receipt-Truncated"
# Why an attempt that proves nothing was sent still leaves the effect unknown.
EARLIER_UNKNOWN = "an earlier attempt's outcome is still unknown"
# A kit's answer carries a stored response base64-encoded inside JSON: room for that.
_KIT_ANSWER_SLACK = 64 * 1024


def wire_key(effect: Effect) -> str:
    """The key the target sees on the effect's current attempt: the derived key, or
    for a transactional target that attempt's own key (derived from it per attempt)."""
    if effect.safety is SafetyClass.TRANSACTIONAL:
        return current_attempt_key(effect)
    return effect.downstream_key


def outgoing_request(
    route: Route,
    stored: StoredRequest,
    downstream_key: str,
    injected: Mapping[str, Mapping[str, str]],
    protocol: TargetProtocol | None = None,
) -> StoredRequest:
    """The stored request with this route's derived key and credentials put in.

    ``downstream_key`` is what ``wire_key`` gives: a transactional attempt's key goes
    out in the attempt key header and is never part of the stored request.
    """
    headers = upstream_request_headers(
        stored.headers,
        operation_key_header=route.operation_key_header,
        downstream_header=route.contract.downstream_header,
        downstream_key=downstream_key,
        inject=injected.get(route.name, {}),
    )
    outgoing = StoredRequest(stored.method, stored.url, headers, stored.body)
    if protocol is None:
        return outgoing
    return protocol.with_key(outgoing, route.contract, downstream_key)


@dataclass(frozen=True, slots=True)
class Probed:
    effect: Effect
    verdict: ProbeVerdict
    elapsed: float


@dataclass(frozen=True, slots=True)
class Dispatched:
    """The settled (or unsettled) effect and what the target said, if anything."""

    effect: Effect
    attempt: AttemptResult


class Dispatcher:
    def __init__(self, wiring: Wiring, *, owner: str) -> None:
        self._store = wiring.store
        self._keyring = wiring.keyring
        self._session = wiring.session
        self._slots = wiring.slots
        self._owner = owner
        self._max_receipt_bytes = wiring.max_receipt_bytes
        self._lease_grace = wiring.lease_grace
        self._protocols = wiring.protocols
        self._waiters = wiring.waiters
        self.metrics = wiring.metrics
        self._rng = random.Random()

    async def start(self, effect: Effect, contract: Contract) -> Effect:
        """Commit DISPATCHING, the attempt and the lease: only then may bytes leave.

        Raises ``StaleVersion`` when another worker moved the effect first.
        """
        return await self._store.start_attempt(
            effect,
            owner=self._owner,
            lease=self.lease_for(contract),
            key_retention=contract.key_retention,
            settlement_bound=contract.settlement_bound,
        )

    def lease_for(self, contract: Contract) -> timedelta:
        """How long a dispatch may run before its holder counts as dead: the queue for
        a free connection, the contract's timeout, and a grace for the ledger write."""
        return self._slots.queue_timeout + contract.timeout + self.grace_for(contract)

    def grace_for(self, contract: Contract) -> timedelta:
        return contract.lease_grace or self._lease_grace

    def window_for(self, contract: Contract) -> SendWindow:
        """The send window of a lease about to be asked for (call it *before* the
        write that takes the lease): its first byte may leave only inside it."""
        return SendWindow.asking_now(self.lease_for(contract), self.grace_for(contract))

    async def send_started(
        self,
        effect: Effect,
        contract: Contract,
        request: StoredRequest,
        window: SendWindow,
        *,
        after_unknown: bool = False,
    ) -> Dispatched:
        """Send for an effect this worker already holds in DISPATCHING (its attempt and
        lease committed, ``window`` taken before the lease was asked for), then settle
        it. ``after_unknown``: an earlier attempt's outcome is unknown, so nothing this
        one proves can make the effect "provably never sent" again."""
        failpoints.hit(failpoints.BEFORE_UPSTREAM_SEND)
        protocol = self._protocols.get(effect.route)
        # (None first: isinstance against a runtime-checkable Protocol is slow.)
        watch = (
            protocol.watch(request)
            if protocol is not None and isinstance(protocol, CutsShort)
            else None
        )
        slot = AsyncExitStack()  # held on past this call while an answer streams
        try:
            await slot.enter_async_context(self._slots.hold(effect.route))
            attempt = await send(
                self._session,
                method=request.method,
                url=request.url,
                headers=request.headers,
                body=request.body,
                timeout=contract.timeout,
                max_body=self._max_receipt_bytes,
                watch=watch,
                window=window,
                streamable=protocol is None,
            )
            if protocol is not None and isinstance(protocol, Follows):
                attempt = await followed(
                    protocol,
                    self._session,
                    request,
                    attempt,
                    contract.timeout,
                    self._max_receipt_bytes,
                )
        except NoFreeSlot as exc:
            attempt = AttemptResult(Delivery.NOT_SENT, detail=str(exc), saturated=True)
        except BaseException:
            await slot.aclose()
            raise
        if attempt.live is None:
            await slot.aclose()
        failpoints.hit(failpoints.AFTER_UPSTREAM_RESPONSE)
        self.metrics.attempts.labels(effect.route, attempt.delivery.value).inc()
        if attempt.withheld:
            log.warning("effect %s: %s", effect.effect_id, attempt.detail)
        if attempt.live is not None:
            stream = self._recorded_stream(
                effect, contract, attempt, window, slot, after_unknown
            )
            return Dispatched(effect, replace(attempt, stream=stream))
        try:
            settled = await self._settle(effect, contract, attempt, after_unknown)
        except BaseException:
            attempt.release()
            raise
        if settled.status not in TERMINAL:
            self.metrics.effects.labels(settled.route, settled.status.value).inc()
        return Dispatched(settled, attempt)

    def _recorded_stream(
        self,
        effect: Effect,
        contract: Contract,
        attempt: AttemptResult,
        window: SendWindow,
        slot: AsyncExitStack,
        after_unknown: bool,
    ) -> RecordedStream:
        """The open answer of unknown length, to be passed on while it arrives and
        settled when it ends (``engine.stream``); the slot is given back then."""
        assert attempt.live is not None and attempt.response is not None
        renew_lease = max(
            self.lease_for(contract), contract.idle_timeout + self.grace_for(contract)
        )

        async def renew(current: Effect) -> Effect:
            return await self._store.renew_lease(
                current, owner=self._owner, lease=renew_lease
            )

        async def settle(current: Effect, ending: Ending) -> Effect:
            try:
                settled = await self._settle(
                    current, contract, _attempt_of(attempt, ending), after_unknown
                )
            finally:  # the stream's end is the work's end: duplicates look again
                self._waiters.notify(current.effect_id)
            if settled.status not in TERMINAL:
                self.metrics.effects.labels(settled.route, settled.status.value).inc()
            return settled

        return RecordedStream(
            effect,
            attempt.response,
            attempt.live,
            idle_timeout=contract.idle_timeout.total_seconds(),
            max_body=self._max_receipt_bytes,
            settle=settle,
            renew=renew,
            release=slot.aclose,
            # The lease cannot end before the window closes plus the grace.
            lease_ends_in=window.closes_at
            + self.grace_for(contract).total_seconds()
            - time.monotonic(),
            renew_lease=renew_lease.total_seconds(),
        )

    async def _settle(
        self,
        effect: Effect,
        contract: Contract,
        attempt: AttemptResult,
        after_unknown: bool = False,
    ) -> Effect:
        if attempt.delivery is Delivery.NOT_SENT and after_unknown:
            return await self._mark_unknown(
                effect, contract, f"{attempt.detail}; {EARLIER_UNKNOWN}"
            )
        if attempt.delivery is Delivery.NOT_SENT:
            cause = _inside_the_proxy(attempt)
            return await self._store.transition(
                effect,
                EffectStatus.RETRYABLE,
                kind="not_sent",
                actor=self._owner,
                due_in=backoff(effect.attempts, rng=self._rng),
                error=attempt.detail
                if cause is None
                else INSIDE_THE_PROXY + attempt.detail,
                details={
                    "reason": attempt.detail,
                    "cause": cause or "target_unreachable",
                    "counts_against_retry_limit": cause is None,
                },
            )
        if attempt.delivery is Delivery.UNKNOWN or attempt.response is None:
            return await self._mark_unknown(effect, contract, attempt.detail)

        response = attempt.response
        protocol = self._protocols.get(effect.route)
        if protocol is not None:
            next_status = protocol.judge(response, effect, contract)
        elif effect.safety is SafetyClass.TRANSACTIONAL:
            next_status = status_after_transactional_answer(
                response, current_attempt_key(effect)
            )
        else:
            next_status = status_after_answer(response.status, effect.safety)
        if next_status is EffectStatus.RETRYABLE and after_unknown:
            return await self._mark_unknown(
                effect, contract, f"target answered {response.status}; {EARLIER_UNKNOWN}"
            )
        if (
            next_status is EffectStatus.RETRYABLE
            and effect.attempts < contract.retry_limit
        ):
            return await self._store.transition(
                effect,
                EffectStatus.RETRYABLE,
                kind="refused",
                actor=self._owner,
                due_in=backoff(effect.attempts, rng=self._rng),
                error=f"target answered {response.status}",
            )
        if next_status is EffectStatus.OUTCOME_UNKNOWN:
            return await self._mark_unknown(
                effect, contract, attempt.detail or f"target answered {response.status}"
            )
        if next_status is EffectStatus.RETRYABLE:
            next_status = EffectStatus.FAILED_FINAL  # out of attempts: final as answered
        return await self.record_receipt(effect, next_status, response, attempt)

    async def record_receipt(
        self,
        effect: Effect,
        status: EffectStatus,
        response: StoredResponse,
        attempt: AttemptResult | None = None,
        *,
        source: ReceiptSource = ReceiptSource.RESPONSE,
        external_id: str | None = None,
        actor: str | None = None,
        kind: str = "settled",
        details: Mapping[str, Any] | None = None,
        omit_body: bool = False,
    ) -> Effect:
        """Seal ``response`` for this effect and settle it with it, in one commit.

        The body is left out (and the receipt says so) when it is longer than a receipt
        holds: ``attempt.overflow`` for a live answer, ``omit_body`` for a looked-up one.
        """
        overflow = omit_body or (
            attempt is not None and (attempt.overflow is not None or attempt.body_omitted)
        )
        kept = (
            StoredResponse(
                response.status,
                response.reason,
                [*response.headers, (TRUNCATED_HEADER, "true")],
                b"",
            )
            if overflow
            else response
        )
        sealed = seal_response(self._keyring, effect, kept)
        settled, _ = await self._store.record_receipt(
            effect,
            status=status,
            status_code=response.status,
            response_ciphertext=sealed,
            source=source,
            actor=actor or self._owner,
            external_id=external_id,
            kind=kind,
            details={**(details or {}), **({"body_omitted": True} if overflow else {})},
        )
        failpoints.hit(failpoints.AFTER_RECEIPT_COMMIT)
        self.metrics.effects.labels(settled.route, settled.status.value).inc()
        return settled

    async def probe(
        self,
        effect: Effect,
        route: Route,
        *,
        stored_url: str,
        injected: Mapping[str, Mapping[str, str]],
    ) -> Probed:
        """Look an unknown reconcilable effect up, then write what the answer proves:
        found settles it with the probe's receipt, a conclusive absence requeues it
        (PREPARED), anything else leaves it unknown for a later look."""
        contract = route.contract
        assert contract.probe is not None, "only reconcilable contracts are probed"
        effect = await self._store.transition(
            effect,
            EffectStatus.RECONCILING,
            kind="probe",
            actor=self._owner,
            lease_owner=self._owner,
            lease=self.lease_for(contract),
        )
        try:
            async with self._slots.hold(effect.route):
                result = await run_probe(
                    self._session,
                    contract.probe,
                    base_url=base_url(route, stored_url),
                    downstream_key=effect.downstream_key,
                    headers=list(injected.get(route.name, {}).items()),
                    timeout=contract.timeout,
                    max_body=self._max_receipt_bytes,
                )
        except NoFreeSlot as exc:
            result = ProbeResult(ProbeVerdict.UNKNOWN, detail=str(exc))
        self.metrics.probes.labels(effect.route, result.verdict.value).inc()
        if result.verdict is ProbeVerdict.FOUND and result.response is not None:
            effect = await self.record_receipt(
                effect,
                EffectStatus.SUCCEEDED,
                result.response,
                source=ReceiptSource.PROBE,
                external_id=result.external_id,
            )
        elif result.verdict is ProbeVerdict.ABSENT:
            effect = await self._store.transition(
                effect, EffectStatus.PREPARED, kind="probe_absent", actor=self._owner
            )
        else:
            effect = await self._store.transition(
                effect,
                EffectStatus.OUTCOME_UNKNOWN,
                kind="probe_unknown",
                actor=self._owner,
                due_in=backoff(effect.attempts, rng=self._rng),
                error=result.detail,
            )
        return Probed(effect, result.verdict, result.elapsed)

    async def look_up(
        self,
        effect: Effect,
        route: Route,
        *,
        stored_url: str,
        injected: Mapping[str, Mapping[str, str]],
    ) -> Probed:
        """Settle a transactional effect's lost attempt by its attempt key.

        Committed (found by the lookup, or the reason a tombstone was refused): the
        answer the attempt committed with becomes the receipt. Tombstoned (now or
        before): the attempt can never commit, so the effect is RETRYABLE at once, the
        evidence in its history, and the retry limit decides whether another attempt,
        under the next key, goes out. Anything else: unknown again, with backoff.
        """
        contract = route.contract
        attempt, key = effect.attempts, current_attempt_key(effect)
        # Two requests may go out under this lease: the lookup, then the tombstone.
        lease = self.lease_for(contract) + contract.timeout
        effect = await self._store.transition(
            effect,
            EffectStatus.RECONCILING,
            kind="lookup",
            actor=self._owner,
            details={"attempt": attempt, "attempt_key": key},
            lease_owner=self._owner,
            lease=lease,
        )
        kit = Kit(
            self._session,
            origin=well_known_origin(route, stored_url),
            headers=list(injected.get(route.name, {}).items()),
            timeout=contract.timeout,
            max_body=2 * self._max_receipt_bytes + _KIT_ANSWER_SLACK,
        )
        elapsed = 0.0
        try:
            async with self._slots.hold(effect.route):
                answer = await kit.look_up(key)
                elapsed += answer.elapsed
                self.metrics.probes.labels(effect.route, _probe_result(answer)).inc()
                if answer.finding is Finding.ABSENT:
                    answer = await kit.tombstone(key)
                    elapsed += answer.elapsed
                    self.metrics.tombstones.labels(
                        effect.route, _tombstone_result(answer)
                    ).inc()
        except NoFreeSlot as exc:
            answer = KitAnswer(Finding.UNKNOWN, detail=str(exc))
            self.metrics.probes.labels(effect.route, ProbeVerdict.UNKNOWN.value).inc()
        evidence = {"attempt": attempt, "attempt_key": key}
        if answer.finding is Finding.COMMITTED and answer.response is not None:
            response = answer.response
            effect = await self.record_receipt(
                effect,
                _settled_status(response.status),
                response,
                source=ReceiptSource.LOOKUP,
                details={**evidence, "committed_at": answer.at},
                omit_body=len(response.body) > self._max_receipt_bytes,
            )
            return Probed(effect, ProbeVerdict.FOUND, elapsed)
        if answer.finding is Finding.TOMBSTONED:
            effect = await self._store.transition(
                effect,
                EffectStatus.RETRYABLE,
                kind="absence_proven",
                actor=self._owner,
                details={
                    **evidence,
                    "tombstoned_at": answer.at,
                    "tombstone": "written" if answer.written else "found",
                },
                due_in=timedelta(0),
                error=f"attempt {attempt} never committed: the target's tombstone for "
                "its key did",
            )
            return Probed(effect, ProbeVerdict.ABSENT, elapsed)
        effect = await self._store.transition(
            effect,
            EffectStatus.OUTCOME_UNKNOWN,
            kind="lookup_unknown",
            actor=self._owner,
            details=evidence,
            due_in=backoff(effect.attempts, rng=self._rng),
            error=answer.detail or "the target's kit gave no proof either way",
        )
        return Probed(effect, ProbeVerdict.UNKNOWN, elapsed)

    async def give_up(self, effect: Effect) -> Effect:
        """Out of attempts, none of which took effect: final, and said so."""
        body = (
            b'{"error": "effect-broker gave up: the target could not be reached on any '
            b'attempt, so nothing was sent"}'
        )
        if effect.safety is SafetyClass.TRANSACTIONAL:
            body = (
                b'{"error": "effect-broker gave up: no attempt took effect at the '
                b"target (each one either never left or was proven never to commit by "
                b'a tombstone at the target), and the retry limit is spent"}'
            )
        response = StoredResponse(
            502, "Bad Gateway", [("Content-Type", "application/json")], body
        )
        return await self.record_receipt(
            effect, EffectStatus.FAILED_FINAL, response, source=ReceiptSource.PROXY
        )

    async def _mark_unknown(self, effect: Effect, contract: Contract, why: str) -> Effect:
        return await self._store.transition(
            effect,
            EffectStatus.OUTCOME_UNKNOWN,
            kind="outcome_unknown",
            actor=self._owner,
            details={"reason": why},  # what the attempt got back, kept in the history
            due_in=next_look_when_unknown(
                effect.safety, effect.attempts, contract.settlement_bound, rng=self._rng
            ),
            error=why,
            # The target may have committed at any moment up to now: only a lookup made
            # a full settlement bound after this point can prove absence.
            settle_within=contract.settlement_bound,
        )


def _inside_the_proxy(attempt: AttemptResult) -> str | None:
    """Why a not-sent attempt failed inside the proxy (None: at or near the target).

    These say nothing about the target: its certificate failed the proxy's own trust
    (fixed by configuration), no pooled connection was free, or the send fence withheld
    the first byte. None may spend the effect's retry limit.
    """
    if attempt.tls:
        return "upstream_tls"
    if attempt.saturated:
        return "pool_exhausted"
    if attempt.withheld:
        return "send_withheld"
    return None


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


def _settled_status(status_code: int) -> EffectStatus:
    """A committed attempt is settled whatever it answered: success, or final as is."""
    if status_after_answer(status_code, SafetyClass.TRANSACTIONAL) is (
        EffectStatus.SUCCEEDED
    ):
        return EffectStatus.SUCCEEDED
    return EffectStatus.FAILED_FINAL


def _probe_result(answer: KitAnswer) -> str:
    """The lookup in the probes metric, in the words reconcilable lookups use."""
    return {
        Finding.COMMITTED: ProbeVerdict.FOUND,
        Finding.ABSENT: ProbeVerdict.ABSENT,
        Finding.TOMBSTONED: ProbeVerdict.ABSENT,
        Finding.UNKNOWN: ProbeVerdict.UNKNOWN,
    }[answer.finding].value


def _tombstone_result(answer: KitAnswer) -> str:
    if answer.finding is Finding.TOMBSTONED:
        return "written" if answer.written else "found"
    return "refused" if answer.finding is Finding.COMMITTED else "unknown"
