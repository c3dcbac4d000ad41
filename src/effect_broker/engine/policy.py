"""What happens next to an effect: the engine's one policy, as a pure function.

Given the persisted effect, its pinned contract and the clock, ``decide`` says whether to
send, replay, wait, look the effect up, or stop and leave it to a person. The request
path (a client retrying with the same key) and the reconciler (a claimed, overdue
effect) ask this same function, so a client retry can never do what the reconciler
would refuse, nor the other way round.

The two callers differ in exactly one fact, passed as ``owned``: whether the caller owns
the effect's current version (the reconciler claimed it, or the caller made the last
write itself). An owner knows that a live lease on the row is its own; anyone else must
treat a live lease as another worker in flight. What each caller does with a "wait"
verdict differs too, but that is carrying the verdict out, not deciding it: the
reconciler reschedules the effect, the request path tells the client when to come back.

Nothing here touches a socket or the database, so every branch is table-tested.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from effect_broker.config.contracts import Contract
from effect_broker.engine.upstream import AttemptResult
from effect_broker.models import Effect, EffectStatus
from effect_broker.models import SafetyClass as Safety
from effect_broker.state_machine import TERMINAL

DEFAULT_RETRY_AFTER = timedelta(seconds=1)

# How ``last_error`` begins when the last attempt failed inside the proxy (its own TLS
# trust, its connection pool, its send fence) rather than at the target: nothing left,
# and nothing was learnt about the target, so the attempt does not spend the retry
# limit. The same key is tried again, under the configuration current by then.
INSIDE_THE_PROXY = "failed inside the proxy, not at the target: "


def failed_inside_the_proxy(effect: Effect) -> bool:
    """Whether the retryable effect's last attempt failed for a reason of the proxy's."""
    return effect.status is EffectStatus.RETRYABLE and (
        effect.last_error or ""
    ).startswith(INSIDE_THE_PROXY)


def not_sent_inside_the_proxy(attempt: AttemptResult) -> str | None:
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


class Verdict(StrEnum):
    DISPATCH = "dispatch"  # nothing left yet, or sending again is provably safe
    REPLAY = "replay"  # settled: give back the stored receipt
    IN_FLIGHT = "in_flight"  # another worker holds a live lease on it
    EXPIRE_LEASE = "expire_lease"  # its holder died mid-flight: mark unknown, go on
    PROBE = "probe"  # reconcilable and unknown: ask the target before anything else
    LOOKUP = "lookup"  # transactional and unknown: look the attempt up, else tombstone it
    WAIT_SETTLEMENT = "wait_settlement"  # a negative lookup proves nothing yet
    REVIEW = "review"  # nothing automatic may settle it any more: hand it to a person
    GIVE_UP = "give_up"  # every attempt provably sent nothing and the limit is spent
    AWAIT_OPERATOR = "await_operator"  # unknown, and only a person can settle it


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    reason: str
    retry_after: timedelta | None = None


def _until(deadline: datetime | None, now: datetime) -> timedelta:
    if deadline is None or deadline <= now:
        return DEFAULT_RETRY_AFTER
    return deadline - now


def decide(
    effect: Effect, contract: Contract, now: datetime, *, owned: bool = False
) -> Decision:
    """The next step for ``effect``; ``owned``: the caller owns its current version."""
    status = effect.status
    if status in TERMINAL:
        return Decision(Verdict.REPLAY, f"settled as {status}")
    if status in (
        EffectStatus.PREPARED,
        EffectStatus.DISPATCHING,
        EffectStatus.RECONCILING,
    ):
        lease_live = effect.lease_expires_at is not None and effect.lease_expires_at > now
        if lease_live and not owned:
            return Decision(
                Verdict.IN_FLIGHT,
                f"{status} by another request or worker",
                _until(effect.lease_expires_at, now),
            )
        if status is EffectStatus.PREPARED:
            return Decision(Verdict.DISPATCH, "reserved or requeued, never sent since")
        return Decision(Verdict.EXPIRE_LEASE, f"{status} lease expired: its holder died")
    if status is EffectStatus.RETRYABLE:
        if failed_inside_the_proxy(effect):
            return Decision(
                Verdict.DISPATCH,
                "the last attempt failed inside the proxy and sent nothing; it does not "
                "count against the retry limit",
            )
        if effect.attempts >= contract.retry_limit:
            return Decision(
                Verdict.GIVE_UP,
                f"all {effect.attempts} attempts provably sent nothing; the retry "
                f"limit is {contract.retry_limit}",
            )
        return Decision(Verdict.DISPATCH, "the last attempt provably sent nothing")
    if status is EffectStatus.MANUAL_REVIEW:
        return Decision(Verdict.AWAIT_OPERATOR, "awaiting an operator's resolution")
    return _decide_unknown(effect, contract, now)


def _decide_unknown(effect: Effect, contract: Contract, now: datetime) -> Decision:
    if effect.safety is Safety.IDEMPOTENT:
        if effect.retention_deadline is None or now >= effect.retention_deadline:
            return Decision(
                Verdict.REVIEW,
                "the target's key retention has passed; resending could do it twice",
            )
        if effect.attempts >= contract.retry_limit:
            return Decision(
                Verdict.REVIEW,
                f"the retry limit of {contract.retry_limit} attempts is spent",
            )
        return Decision(Verdict.DISPATCH, "idempotent: same key within its retention")
    if effect.safety is Safety.TRANSACTIONAL:
        if effect.attempts < 1:  # nothing was ever started, so no attempt key exists
            return Decision(
                Verdict.AWAIT_OPERATOR, "unknown before any attempt: nothing to look up"
            )
        # No settlement bound and no retry limit: the lookup sends nothing, and what
        # it finds (or the tombstone it leaves) is conclusive the moment it commits.
        return Decision(
            Verdict.LOOKUP,
            f"transactional: look attempt {effect.attempts} up, and tombstone it if "
            "it is absent",
        )
    if effect.safety is Safety.RECONCILABLE and contract.probe is not None:
        if effect.settlement_deadline is not None and now < effect.settlement_deadline:
            return Decision(
                Verdict.WAIT_SETTLEMENT,
                "the target's lookup is not conclusive before its settlement bound",
                _until(effect.settlement_deadline, now),
            )
        return Decision(Verdict.PROBE, "reconcilable: look the effect up first")
    return Decision(
        Verdict.AWAIT_OPERATOR,
        f"an {effect.safety} target can neither deduplicate nor be asked what happened",
    )
