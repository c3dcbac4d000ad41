"""What evidence proves about an effect, and the state it moves to: the engine's ruling.

The dispatcher does the I/O (an attempt at the target, a probe, a kit's lookup and
tombstone) and hands back *evidence*: what was sent, what came back, what is proven.
``policy.decide`` and an operator supply the rest: a holder's lease ran out on the
database's clock, the retry limit is spent, only a person can settle it now, or an
operator's resolution. ``rule`` is the one function that turns any of these into the
effect's next state (``next_state.Ruling``): its status, the event and attempt fields
the ledger records (kind, error, details), when the reconciler looks again, the
receipt that settles it, and which ``Outcome`` case the caller answers with. The
engine then writes the ruling through its ledger port, and nothing else decides
anything on the way.

So the request path, the reconciler, lookups, probes and operator resolution cannot
disagree about what a piece of evidence means: they all ask here. Nothing in this
module touches a socket or the database, so every branch is table-tested in
``tests/unit/test_rulings.py``. The tables it reads are pure too: ``outcomes`` (what
an HTTP status proves), ``lookup`` (what a kit's answer proves), ``probe`` (what a
probe's answer proves), ``resolution`` (what an operator may do) and, through the
store, ``state_machine`` (which move is legal).
"""

from __future__ import annotations

from datetime import timedelta
from random import Random
from typing import Any

from effect_broker.config.contracts import Contract
from effect_broker.engine.evidence import (
    Asking,
    Attempted,
    Evidence,
    LeaseLapsed,
    LookedUp,
    PastAutomation,
    Probed,
    Resolved,
    RetriesSpent,
)
from effect_broker.engine.lookup import (
    Finding,
    current_attempt_key,
    status_after_transactional_answer,
)
from effect_broker.engine.messages import StoredResponse
from effect_broker.engine.next_state import Ruling, Settling, Then
from effect_broker.engine.outcomes import (
    backoff,
    committed_status,
    gave_up_answer,
    next_look_when_unknown,
    status_after_answer,
)
from effect_broker.engine.policy import INSIDE_THE_PROXY, not_sent_inside_the_proxy
from effect_broker.engine.probe import ProbeResult, ProbeVerdict
from effect_broker.engine.protocol import TargetProtocol
from effect_broker.engine.resolution import ResolutionRequest, plan
from effect_broker.engine.results import Unknowable
from effect_broker.engine.upstream import AttemptResult, Delivery
from effect_broker.models import Effect, EffectStatus, ReceiptSource, SafetyClass

# When a client may try again after an attempt that provably sent nothing.
FENCED_RETRY = timedelta(seconds=1)
# When a client may ask again after a lookup that proved nothing either way.
INCONCLUSIVE_RETRY = timedelta(seconds=5)
# Why an attempt that proves nothing was sent still leaves the effect unknown.
EARLIER_UNKNOWN = "an earlier attempt's outcome is still unknown"


def rule(
    effect: Effect, contract: Contract | None, evidence: Evidence, *, rng: Random
) -> Ruling:
    """The next state of ``effect`` under its pinned ``contract``, given ``evidence``.

    ``rng`` spreads the reconciler's next looks apart (backoff with jitter); it is the
    only input besides the arguments. ``contract`` may be None only for an operator's
    resolution (the effect's route may be gone from the configuration by then).
    Raises what ``resolution.plan`` raises for a resolution the effect cannot take.
    """
    if isinstance(evidence, Resolved):
        return _resolved(effect, evidence.request)
    if contract is None:
        raise ValueError(f"{type(evidence).__name__} is ruled under the pinned contract")
    match evidence:
        case Attempted():
            return _attempted(effect, contract, evidence, rng)
        case Probed():
            return _probed(effect, evidence.result, rng)
        case LookedUp():
            return _looked_up(effect, evidence, rng)
        case Asking():
            return _asking(effect, contract, evidence.lease)
        case LeaseLapsed():
            return Ruling(
                EffectStatus.OUTCOME_UNKNOWN,
                "lease_expired",
                error=f"the worker holding it stopped while it was {effect.status}",
                # Keep it leased to the taker: if that process dies next, the
                # reconciler still finds it once the lease runs out, never stranded
                # with nothing due.
                lease=evidence.lease,
                settle_within=contract.settlement_bound,
            )
        case RetriesSpent():
            return Ruling(
                EffectStatus.FAILED_FINAL,
                "settled",
                receipt=Settling(gave_up_answer(effect.safety), ReceiptSource.PROXY),
            )
        case PastAutomation():
            return Ruling(
                EffectStatus.MANUAL_REVIEW,
                "manual_review",
                error=evidence.reason,
                then=Then.UNKNOWN,
                why=Unknowable.AWAITING_OPERATOR,
                detail=evidence.reason,
            )
    raise TypeError(f"no rule for {evidence!r}")  # pragma: no cover - exhaustive


# -- an attempt -------------------------------------------------------------------------


def _attempted(
    effect: Effect, contract: Contract, evidence: Attempted, rng: Random
) -> Ruling:
    """What one attempt proved. Only an attempt that provably sent nothing, or an
    answer that proves a refusal before processing, may lead to another attempt; an
    earlier unknown outcome stays unknown whatever a later attempt proves."""
    attempt, after_unknown = evidence.attempt, evidence.after_unknown
    if attempt.delivery is Delivery.NOT_SENT and after_unknown:
        return _unknown(
            effect, contract, f"{attempt.detail}; {EARLIER_UNKNOWN}", rng, attempt
        )
    if attempt.delivery is Delivery.NOT_SENT:
        cause = not_sent_inside_the_proxy(attempt)
        return Ruling(
            EffectStatus.RETRYABLE,
            "not_sent",
            due_in=backoff(effect.attempts, rng=rng),
            error=attempt.detail if cause is None else INSIDE_THE_PROXY + attempt.detail,
            details={
                "reason": attempt.detail,
                "cause": cause or "target_unreachable",
                "counts_against_retry_limit": cause is None,
            },
            then=Then.NOT_SENT,
            detail=attempt.detail,
            retry_after=FENCED_RETRY,
        )
    response = attempt.response
    if attempt.delivery is Delivery.UNKNOWN or response is None:
        return _unknown(effect, contract, attempt.detail, rng, attempt)
    next_status = _judged(effect, contract, response, evidence.protocol)
    if next_status is EffectStatus.RETRYABLE and after_unknown:
        why = f"target answered {response.status}; {EARLIER_UNKNOWN}"
        return _unknown(effect, contract, why, rng, attempt)
    if next_status is EffectStatus.RETRYABLE and effect.attempts < contract.retry_limit:
        return Ruling(
            EffectStatus.RETRYABLE,
            "refused",
            due_in=backoff(effect.attempts, rng=rng),
            error=f"target answered {response.status}",
            then=Then.ANSWERED,
        )
    if next_status is EffectStatus.OUTCOME_UNKNOWN:
        why = attempt.detail or f"target answered {response.status}"
        return _unknown(effect, contract, why, rng, attempt)
    if next_status is EffectStatus.RETRYABLE:
        next_status = EffectStatus.FAILED_FINAL  # out of attempts: final as answered
    omit = attempt.overflow is not None or attempt.body_omitted
    return Ruling(
        next_status,
        "settled",
        receipt=Settling(response, omit_body=omit),
        then=Then.ANSWERED,
    )


def _judged(
    effect: Effect,
    contract: Contract,
    response: StoredResponse,
    protocol: TargetProtocol | None,
) -> EffectStatus:
    """What a complete answer proves, read the way its target speaks."""
    if protocol is not None:
        return protocol.judge(response, effect, contract)
    if effect.safety is SafetyClass.TRANSACTIONAL:
        return status_after_transactional_answer(response, current_attempt_key(effect))
    return status_after_answer(response.status, effect.safety)


def _unknown(
    effect: Effect, contract: Contract, why: str, rng: Random, attempt: AttemptResult
) -> Ruling:
    """The target may have acted: unknown, with what the attempt got back kept in the
    history, and the next look when the contract allows one."""
    response = attempt.response
    return Ruling(
        EffectStatus.OUTCOME_UNKNOWN,
        "outcome_unknown",
        details={"reason": why},
        due_in=next_look_when_unknown(
            effect.safety, effect.attempts, contract.settlement_bound, rng=rng
        ),
        error=why,
        # The target may have committed at any moment up to now: only a lookup made
        # a full settlement bound after this point can prove absence.
        settle_within=contract.settlement_bound,
        then=Then.UNKNOWN,
        why=Unknowable.TIMED_OUT if attempt.timed_out else Unknowable.LOST,
        detail=attempt.detail
        or (f"target answered {response.status}" if response is not None else ""),
    )


# -- asking the target ------------------------------------------------------------------


def _asking(effect: Effect, contract: Contract, lease: timedelta) -> Ruling:
    """Reconciling while the target is asked; a kit's lookup may be followed by a
    tombstone under the same lease, so it holds the effect one timeout longer."""
    if effect.safety is SafetyClass.TRANSACTIONAL:
        return Ruling(
            EffectStatus.RECONCILING,
            "lookup",
            details=_attempt_evidence(effect),
            lease=lease + contract.timeout,
        )
    return Ruling(EffectStatus.RECONCILING, "probe", lease=lease)


def _probed(effect: Effect, result: ProbeResult, rng: Random) -> Ruling:
    """Found settles with the probe's receipt, a conclusive absence requeues
    (PREPARED), anything else leaves the effect unknown for a later look."""
    if result.verdict is ProbeVerdict.FOUND and result.response is not None:
        return Ruling(
            EffectStatus.SUCCEEDED,
            "settled",
            receipt=Settling(
                result.response, ReceiptSource.PROBE, external_id=result.external_id
            ),
        )
    if result.verdict is ProbeVerdict.ABSENT:
        return Ruling(EffectStatus.PREPARED, "probe_absent")
    return Ruling(
        EffectStatus.OUTCOME_UNKNOWN,
        "probe_unknown",
        due_in=backoff(effect.attempts, rng=rng),
        error=result.detail,
        then=Then.UNKNOWN,
        why=Unknowable.LOOKUP_INCONCLUSIVE,
        detail="the target's lookup could not say whether this effect happened",
        retry_after=INCONCLUSIVE_RETRY,
    )


def _looked_up(effect: Effect, evidence: LookedUp, rng: Random) -> Ruling:
    """Committed (found by the lookup, or the reason a tombstone was refused): the
    answer the attempt committed with becomes the receipt. Tombstoned (now or
    before): the attempt can never commit, so the effect is RETRYABLE at once, the
    evidence in its history, and the retry limit decides whether another attempt,
    under the next key, goes out. Anything else: unknown again, with backoff."""
    answer = evidence.answer
    proof = _attempt_evidence(effect)
    if answer.finding is Finding.COMMITTED and answer.response is not None:
        response = answer.response
        return Ruling(
            committed_status(response.status),
            "settled",
            details={**proof, "committed_at": answer.at},
            receipt=Settling(
                response, ReceiptSource.LOOKUP, omit_body=evidence.oversized
            ),
        )
    if answer.finding is Finding.TOMBSTONED:
        return Ruling(
            EffectStatus.RETRYABLE,
            "absence_proven",
            details={
                **proof,
                "tombstoned_at": answer.at,
                "tombstone": "written" if answer.written else "found",
            },
            due_in=timedelta(0),
            error=f"attempt {effect.attempts} never committed: the target's tombstone "
            "for its key did",
        )
    error = answer.detail or "the target's kit gave no proof either way"
    return Ruling(
        EffectStatus.OUTCOME_UNKNOWN,
        "lookup_unknown",
        details=proof,
        due_in=backoff(effect.attempts, rng=rng),
        error=error,
        then=Then.UNKNOWN,
        why=Unknowable.LOOKUP_INCONCLUSIVE,
        detail=f"the target's kit could not say whether attempt {effect.attempts} "
        f"committed ({error})",
        retry_after=INCONCLUSIVE_RETRY,
    )


def _attempt_evidence(effect: Effect) -> dict[str, Any]:
    return {"attempt": effect.attempts, "attempt_key": current_attempt_key(effect)}


# -- an operator ------------------------------------------------------------------------


def _resolved(effect: Effect, request: ResolutionRequest) -> Ruling:
    """A requeue (due at once), or a settlement with the operator's receipt; refused
    by ``resolution.plan`` where the effect's status or contract forbids it."""
    planned = plan(effect, request)
    if planned.receipt is None:
        return Ruling(
            planned.status,
            planned.kind,
            details=planned.details,
            due_in=timedelta(0),
            then=Then.NOTHING,
        )
    return Ruling(
        planned.status,
        planned.kind,
        details=planned.details,
        receipt=Settling(planned.receipt, planned.source, request.external_id),
        then=Then.NOTHING,
    )
