"""The engine's hands at the target: I/O only, and evidence back.

Three things go to a target, each within a slot of the route's budget (``slots``) and
the contract's timeout: an attempt (``send``: once, fenced by the attempt's send window,
with no transport retry), a reconcilable target's probe (``probe``), and a
transactional target's kit lookup, followed by a tombstone when the lookup finds
nothing (``look_up``). Each returns the evidence ``rulings`` reads: what was sent,
what came back, what it proves by itself. Nothing here reads or writes the ledger, and
nothing here decides the effect's next state: the engine rules on the evidence and
writes the ruling (``rulings``, ``recorder``). What is counted here is what happened on
the wire (attempts, probes, tombstones), not what it meant.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from effect_broker import failpoints
from effect_broker.config.contracts import Contract, Route
from effect_broker.engine.evidence import Attempted, LookedUp, Probed
from effect_broker.engine.fence import SendWindow
from effect_broker.engine.follow import followed
from effect_broker.engine.lookup import Finding, Kit, KitAnswer, current_attempt_key
from effect_broker.engine.messages import StoredRequest
from effect_broker.engine.probe import ProbeResult, ProbeVerdict, run_probe
from effect_broker.engine.protocol import CutsShort, Follows
from effect_broker.engine.slots import NoFreeSlot, Slot
from effect_broker.engine.targets import base_url, well_known_origin
from effect_broker.engine.upstream import AttemptResult, Delivery, send
from effect_broker.engine.wiring import Wiring
from effect_broker.models import Effect

log = logging.getLogger("effect_broker.engine")

#: The slot of an attempt that never got one: nothing to give back.
NO_SLOT = Slot(None)

# A kit's answer carries a stored response base64-encoded inside JSON: room for that.
_KIT_ANSWER_SLACK = 64 * 1024


@dataclass(frozen=True, slots=True)
class Sent:
    """An attempt's evidence, and the route slot it holds: given back already, unless
    the answer is still open (``attempt.live``), whose end must close it."""

    evidence: Attempted
    slot: Slot


@dataclass(frozen=True, slots=True)
class Asked:
    """A probe's or a kit's answer, and the seconds spent waiting on the target."""

    evidence: Probed | LookedUp
    elapsed: float


class Dispatcher:
    def __init__(self, wiring: Wiring) -> None:
        self._session = wiring.session
        self._slots = wiring.slots
        self._max_receipt_bytes = wiring.max_receipt_bytes
        self._protocols = wiring.protocols
        self._injected = wiring.injected
        self.metrics = wiring.metrics

    async def send(
        self,
        effect: Effect,
        contract: Contract,
        request: StoredRequest,
        window: SendWindow,
        *,
        after_unknown: bool = False,
    ) -> Sent:
        """Send once for an effect the engine holds in DISPATCHING (its attempt and
        lease committed, ``window`` taken before the lease was asked for).
        ``after_unknown`` is passed on in the evidence: an earlier attempt's outcome
        is unknown, which the ruling must not forget."""
        failpoints.hit(failpoints.BEFORE_UPSTREAM_SEND)
        protocol = self._protocols.get(effect.route)
        # (None first: isinstance against a runtime-checkable Protocol is slow.)
        watch = (
            protocol.watch(request)
            if protocol is not None and isinstance(protocol, CutsShort)
            else None
        )
        slot = NO_SLOT  # a taken one is held on past this call while an answer streams
        try:
            slot = await self._slots.take(effect.route)
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
            slot.release()
            raise
        if attempt.live is None:
            slot.release()
        failpoints.hit(failpoints.AFTER_UPSTREAM_RESPONSE)
        self.metrics.count(self.metrics.attempts, effect.route, attempt.delivery.value)
        if attempt.withheld:
            log.warning("effect %s: %s", effect.effect_id, attempt.detail)
        return Sent(Attempted(attempt, after_unknown, protocol), slot)

    async def probe(self, effect: Effect, route: Route, *, stored_url: str) -> Asked:
        """Ask a reconcilable target about the effect by its correlation key."""
        contract = route.contract
        assert contract.probe is not None, "only reconcilable contracts are probed"
        try:
            async with self._slots.hold(effect.route):
                result = await run_probe(
                    self._session,
                    contract.probe,
                    base_url=base_url(route, stored_url),
                    downstream_key=effect.downstream_key,
                    headers=list(self._injected.get(route.name, {}).items()),
                    timeout=contract.timeout,
                    max_body=self._max_receipt_bytes,
                )
        except NoFreeSlot as exc:
            result = ProbeResult(ProbeVerdict.UNKNOWN, detail=str(exc))
        self.metrics.probes.labels(effect.route, result.verdict.value).inc()
        return Asked(Probed(result), result.elapsed)

    async def look_up(self, effect: Effect, route: Route, *, stored_url: str) -> Asked:
        """Ask a transactional target's kit about the effect's current attempt key,
        and tombstone the key when the lookup finds neither its receipt nor a
        tombstone: only a tombstone that commits proves the attempt never will."""
        contract = route.contract
        key = current_attempt_key(effect)
        kit = Kit(
            self._session,
            origin=well_known_origin(route, stored_url),
            headers=list(self._injected.get(route.name, {}).items()),
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
        oversized = (
            answer.response is not None
            and len(answer.response.body) > self._max_receipt_bytes
        )
        return Asked(LookedUp(answer, oversized), elapsed)


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
