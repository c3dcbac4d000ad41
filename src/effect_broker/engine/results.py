"""What the engine did with an effect, as values its adapters turn into answers.

The engine never builds an HTTP answer: the proxy renders these as responses or problem
details, the reconciler logs them. Each kind says only what the ledger can prove.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum

from effect_broker.engine.messages import StoredResponse
from effect_broker.engine.upstream import AttemptResult
from effect_broker.models import Effect, ReceiptSource


@dataclass(frozen=True, slots=True)
class Result:
    effect: Effect
    upstream_seconds: float = field(default=0.0, kw_only=True)


@dataclass(frozen=True, slots=True)
class Answered(Result):
    """The target answered this attempt; the effect records what the answer proves.

    ``attempt.overflow`` is set when the body is longer than a receipt holds: the
    caller streams the rest and must ``attempt.release()``.
    """

    attempt: AttemptResult


@dataclass(frozen=True, slots=True)
class Replayed(Result):
    """Settled earlier (or just now, by a lookup or by giving up): its stored receipt.

    ``source`` says who wrote it: an operator's receipt is not the target's answer and
    must never be shown as if it were.
    """

    response: StoredResponse
    source: ReceiptSource = ReceiptSource.RESPONSE


@dataclass(frozen=True, slots=True)
class Conflict(Result):
    """The operation key is bound to another payload; nothing was sent."""


@dataclass(frozen=True, slots=True)
class Busy(Result):
    """Another request or worker holds the effect right now; nothing was sent."""

    reason: str
    retry_after: timedelta


@dataclass(frozen=True, slots=True)
class NotSent(Result):
    """The attempt provably sent nothing (no connection); the effect is retryable.

    ``saturated``: no connection was free within the queue bound (this proxy's limit),
    as opposed to the target refusing or being unreachable. ``tls``: the target's
    certificate failed verification. ``withheld``: the proxy was held up past the
    attempt's send window and wrote nothing (``engine.fence``).
    """

    detail: str
    retry_after: timedelta
    saturated: bool = False
    tls: bool = False
    withheld: bool = False


class Unknowable(StrEnum):
    """Why the outcome is unknown: each is a different sentence for the client."""

    TIMED_OUT = "timed_out"  # sent; no complete answer within the contract's timeout
    LOST = "lost"  # sent; the connection broke or the target's answer proves nothing
    SETTLING = "settling"  # a lookup is not conclusive before the settlement bound
    LOOKUP_INCONCLUSIVE = "lookup_inconclusive"  # the lookup could not say
    AWAITING_OPERATOR = "awaiting_operator"  # only a person can settle it now


@dataclass(frozen=True, slots=True)
class Unknown(Result):
    """The target may or may not have applied the effect; it is not sent again now."""

    why: Unknowable
    detail: str
    retry_after: timedelta | None = None


Outcome = Answered | Replayed | Conflict | Busy | NotSent | Unknown
