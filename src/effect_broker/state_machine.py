"""The effect lifecycle as a pure transition table.

The store enforces this table on every write (compare-and-swap on ``version``), so a bug
in the proxy or the reconciler cannot walk an effect into a state that would claim more
than the target can prove. Two kinds of rule live here:

* which status may follow which, whatever the contract says;
* which of those moves a safety class permits. An ``unsafe`` effect is never dispatched
  again once anything may have left, and only an ``idempotent`` target may be sent the
  same request again while its outcome is unknown. A ``transactional`` effect is looked
  up like a reconcilable one, but its lookup ends in a proof either way: the attempt's
  receipt (success or a final refusal), or a tombstone that makes the attempt unable to
  ever commit, after which the effect is RETRYABLE under the retry limit like any
  attempt that provably changed nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from effect_broker.errors import IllegalTransition
from effect_broker.models import EffectStatus as S
from effect_broker.models import SafetyClass

TERMINAL: frozenset[S] = frozenset({S.SUCCEEDED, S.FAILED_FINAL})

TRANSITIONS: Mapping[S, frozenset[S]] = {
    # Reserved, nothing sent yet; also where a proven "not committed" requeues to.
    S.PREPARED: frozenset({S.DISPATCHING}),
    # Bytes may have left: only the target's answer (or its absence) decides.
    S.DISPATCHING: frozenset(
        {S.SUCCEEDED, S.FAILED_FINAL, S.RETRYABLE, S.OUTCOME_UNKNOWN}
    ),
    # Proven not committed (connection refused, 429/503 with proof): try again later,
    # or give up for good once the retry limit is spent.
    S.RETRYABLE: frozenset({S.DISPATCHING, S.FAILED_FINAL}),
    # The target may have committed. Redispatch (idempotent), probe (reconcilable),
    # hand to a person, or accept an operator's resolution.
    S.OUTCOME_UNKNOWN: frozenset(
        {
            S.DISPATCHING,
            S.RECONCILING,
            S.MANUAL_REVIEW,
            S.SUCCEEDED,
            S.PREPARED,
            S.FAILED_FINAL,
        }
    ),
    # A probe is out: found, conclusively absent, still unknown, or out of patience.
    # A transactional lookup may also find a committed refusal (final) or tombstone the
    # attempt (retryable: proven never to commit).
    S.RECONCILING: frozenset(
        {
            S.SUCCEEDED,
            S.FAILED_FINAL,
            S.PREPARED,
            S.RETRYABLE,
            S.OUTCOME_UNKNOWN,
            S.MANUAL_REVIEW,
        }
    ),
    # Only an operator, with evidence, moves an effect out of review.
    S.MANUAL_REVIEW: frozenset({S.SUCCEEDED, S.PREPARED, S.FAILED_FINAL}),
    S.SUCCEEDED: frozenset(),
    S.FAILED_FINAL: frozenset(),
}

# Moves that only some safety classes may make. Anything not listed is class-independent.
_CLASS_GUARDS: Mapping[tuple[S, S], frozenset[SafetyClass]] = {
    # Sending again while the outcome is unknown is safe only with a stable, honoured key.
    (S.OUTCOME_UNKNOWN, S.DISPATCHING): frozenset({SafetyClass.IDEMPOTENT}),
    # Only a contract with an authoritative lookup can be probed.
    (S.OUTCOME_UNKNOWN, S.RECONCILING): frozenset(
        {SafetyClass.RECONCILABLE, SafetyClass.TRANSACTIONAL}
    ),
    (S.RECONCILING, S.PREPARED): frozenset({SafetyClass.RECONCILABLE}),
    # Only the kit's lookup carries the attempt's own answer, which may be a refusal,
    # and only its tombstone proves that an attempt will never commit.
    (S.RECONCILING, S.FAILED_FINAL): frozenset({SafetyClass.TRANSACTIONAL}),
    (S.RECONCILING, S.RETRYABLE): frozenset({SafetyClass.TRANSACTIONAL}),
    # A requeue means "dispatch again": never for a target that cannot deduplicate or
    # be asked, whatever an operator believes.
    (S.OUTCOME_UNKNOWN, S.PREPARED): frozenset(
        {SafetyClass.IDEMPOTENT, SafetyClass.RECONCILABLE}
    ),
    (S.MANUAL_REVIEW, S.PREPARED): frozenset(
        {SafetyClass.IDEMPOTENT, SafetyClass.RECONCILABLE}
    ),
}


def is_allowed(current: S, target: S, safety: SafetyClass) -> bool:
    """Whether an effect of this safety class may move from ``current`` to ``target``."""
    if target not in TRANSITIONS[current]:
        return False
    allowed_classes = _CLASS_GUARDS.get((current, target))
    return allowed_classes is None or safety in allowed_classes


def check_transition(current: S, target: S, safety: SafetyClass) -> None:
    """Raise ``IllegalTransition`` with a readable reason unless the move is allowed."""
    if is_allowed(current, target, safety):
        return
    if current in TERMINAL:
        reason = f"{current} is terminal; a correction is a new linked event"
    elif target in TRANSITIONS[current]:
        reason = f"a {safety} contract may not move from {current} to {target}"
    else:
        reason = f"{current} cannot move to {target}"
    raise IllegalTransition(f"illegal transition: {reason}")


def allowed_sources(target: S, safety: SafetyClass) -> tuple[S, ...]:
    """Every status from which ``target`` is reachable for this class (for SQL guards)."""
    return tuple(s for s in S if is_allowed(s, target, safety))
