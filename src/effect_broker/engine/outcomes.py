"""What a target's answer proves about a commit (pure, no I/O).

The table is deliberately conservative: only an answer that shows the request was
refused before anything happened may lead to another attempt of a non-idempotent
effect. Everything ambiguous becomes OUTCOME_UNKNOWN.
"""

from __future__ import annotations

from datetime import timedelta
from random import Random

from effect_broker.engine.messages import StoredResponse
from effect_broker.models import EffectStatus, SafetyClass

# Rate limiting is applied before a request is processed: a 429 proves no commit.
_REFUSED_BEFORE_PROCESSING = frozenset({429})
# "Try again" answers that may come after partial work; safe to resend only with a key.
_RETRY_WITH_KEY = frozenset({503})
# The client errors that are no final refusal: 408 (the target stopped waiting for the
# request, which may have run by then) and 429 (refused for now, before processing).
_NOT_FINAL_4XX = frozenset({408, *_REFUSED_BEFORE_PROCESSING})


def refused_for_good(status_code: int) -> bool:
    """Whether an answer is a client error that refuses the request for good.

    The one statement of the retryable and ambiguous statuses: 408 and 429 are client
    errors that are not final (see ``_NOT_FINAL_4XX``), and no 5xx is ever a refusal
    one can rely on. Every reading of a target's status (plain HTTP here, an MCP
    target's HTTP layer) asks this function rather than keeping its own list.
    """
    return 400 <= status_code < 500 and status_code not in _NOT_FINAL_4XX


def status_after_answer(status_code: int, safety: SafetyClass) -> EffectStatus:
    """The effect's next status given the HTTP status the target answered with."""
    if 200 <= status_code < 300 or status_code == 303:  # 303: done, result elsewhere
        return EffectStatus.SUCCEEDED
    if safety is SafetyClass.TRANSACTIONAL and (
        status_code in _REFUSED_BEFORE_PROCESSING or status_code >= 500
    ):
        # The kit's lookup proves what happened: no status needs reading as a proof.
        return EffectStatus.OUTCOME_UNKNOWN
    if status_code in _REFUSED_BEFORE_PROCESSING:
        return EffectStatus.RETRYABLE
    if status_code in _RETRY_WITH_KEY and safety is SafetyClass.IDEMPOTENT:
        return EffectStatus.RETRYABLE
    if 300 <= status_code < 400 or refused_for_good(status_code):
        # Redirects (not followed) and client errors: refused, replayed as they are.
        return EffectStatus.FAILED_FINAL
    # 408 and 5xx prove nothing either way.
    return EffectStatus.OUTCOME_UNKNOWN


def backoff(
    attempts: int, *, rng: Random, base: float = 1.0, cap: float = 300.0
) -> timedelta:
    """Exponential backoff with full jitter: spreads retries of many effects apart."""
    ceiling = min(cap, base * 2 ** max(attempts - 1, 0))
    return timedelta(seconds=rng.uniform(ceiling / 2, ceiling))


def next_look_when_unknown(
    safety: SafetyClass, attempts: int, settlement_bound: timedelta | None, *, rng: Random
) -> timedelta | None:
    """When the reconciler should look at an unknown effect again; None: only a person.

    An unsafe effect is never retried or probed, so nothing is due for it: it waits,
    visible in the list and the metrics, for an operator's resolution with evidence. A
    transactional one is looked up at once: the kit's answer needs no settling time.
    """
    if safety is SafetyClass.TRANSACTIONAL:
        return timedelta(0)
    if safety is SafetyClass.IDEMPOTENT:
        return backoff(attempts, rng=rng)
    if safety is SafetyClass.RECONCILABLE:
        return settlement_bound or backoff(attempts, rng=rng)
    return None


def committed_status(status_code: int) -> EffectStatus:
    """A committed attempt is settled whatever it answered: success, or final as is."""
    if status_after_answer(status_code, SafetyClass.TRANSACTIONAL) is (
        EffectStatus.SUCCEEDED
    ):
        return EffectStatus.SUCCEEDED
    return EffectStatus.FAILED_FINAL


def gave_up_answer(safety: SafetyClass) -> StoredResponse:
    """The proxy's own receipt for an effect out of attempts, none of which took
    effect: final, and said so."""
    body = (
        b'{"error": "effect-broker gave up: the target could not be reached on any '
        b'attempt, so nothing was sent"}'
    )
    if safety is SafetyClass.TRANSACTIONAL:
        body = (
            b'{"error": "effect-broker gave up: no attempt took effect at the '
            b"target (each one either never left or was proven never to commit by "
            b'a tombstone at the target), and the retry limit is spent"}'
        )
    return StoredResponse(
        502, "Bad Gateway", [("Content-Type", "application/json")], body
    )
