"""A ruling: the next state of an effect, as a value the engine writes and answers by.

``rulings.rule`` makes one from evidence; ``recorder.Recorder.write`` writes it through
the ledger port; ``outcome_of`` says which ``Outcome`` case the caller gets once it is
written. Keeping the value apart from the rules lets the writer and the answer depend
on what a ruling *is* without depending on how it is reached.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

from effect_broker.engine.messages import StoredResponse
from effect_broker.engine.results import (
    Answered,
    NotSent,
    Outcome,
    Unknowable,
    Unknown,
)
from effect_broker.engine.upstream import AttemptResult
from effect_broker.models import Effect, EffectStatus, ReceiptSource


class Then(StrEnum):
    """What the caller is told once the ruling is written."""

    DECIDE = "decide"  # nothing yet: the policy looks at the new row (a replay, a send)
    ANSWERED = "answered"  # the target's answer to this attempt goes back (``Answered``)
    NOT_SENT = "not_sent"  # the attempt provably sent nothing (``NotSent``)
    UNKNOWN = "unknown"  # the target may or may not have acted (``Unknown``)
    NOTHING = "nothing"  # an operator's write: the caller gets the effect itself


@dataclass(frozen=True, slots=True)
class Settling:
    """The receipt that settles the effect: an answer, and who vouches for it."""

    response: StoredResponse
    source: ReceiptSource = ReceiptSource.RESPONSE
    external_id: str | None = None
    omit_body: bool = False  # longer than a receipt holds: keep the head, say so


@dataclass(frozen=True, slots=True)
class Ruling:
    """The effect's next state, ready to be written, and what to answer after.

    Without ``receipt`` it is one compare-and-swap transition: ``kind``, ``error`` and
    ``details`` go into the effect's row, its attempt and its history; ``due_in`` is
    when the reconciler looks again (None: nobody but a person); ``lease`` keeps the
    effect held by the writer; ``settle_within`` restarts the settlement clock. With
    a ``receipt`` it settles the effect and stores the receipt in one commit.
    """

    status: EffectStatus
    kind: str
    error: str | None = None
    details: Mapping[str, Any] | None = None
    due_in: timedelta | None = None
    settle_within: timedelta | None = None
    lease: timedelta | None = None
    receipt: Settling | None = None
    then: Then = Then.DECIDE
    why: Unknowable | None = None  # with ``Then.UNKNOWN``
    detail: str = ""  # with ``Then.UNKNOWN`` and ``Then.NOT_SENT``: the client's sentence
    retry_after: timedelta | None = None


def outcome_of(
    ruling: Ruling, effect: Effect, attempt: AttemptResult | None = None
) -> Outcome | None:
    """The answer once ``ruling`` is written (``effect`` as the ledger wrote it), or
    None when the policy must look at the new row first. ``attempt``: the attempt the
    ruling was made on, whose time at the target the answer reports."""
    elapsed = 0.0 if attempt is None else attempt.elapsed
    if ruling.then is Then.ANSWERED and attempt is not None:
        return Answered(effect, attempt, upstream_seconds=elapsed)
    if ruling.then is Then.NOT_SENT and attempt is not None:
        assert ruling.retry_after is not None
        return NotSent(
            effect,
            ruling.detail,
            ruling.retry_after,
            saturated=attempt.saturated,
            tls=attempt.tls,
            withheld=attempt.withheld,
            upstream_seconds=elapsed,
        )
    if ruling.then is Then.UNKNOWN:
        assert ruling.why is not None
        return Unknown(
            effect,
            ruling.why,
            ruling.detail,
            ruling.retry_after,
            upstream_seconds=elapsed,
        )
    return None
