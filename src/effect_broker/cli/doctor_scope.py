"""Key scope for ``effect-broker doctor``: routes whose keys look minted per call.

A key built from something fresh per call (a new uuid4, the time, a model's whim) makes
every retry a new effect, and the ledger cannot stop the duplicate. The sign in the
ledger: many effects on a route whose canonical request equals an earlier effect's
under another key. A few are normal (two equal orders); a large share is not. Pure:
the counts come from the ledger, the judgement is here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from effect_broker.config.durations import format_duration

#: Below this many effects in the window a route says too little to judge.
MIN_EFFECTS = 10
#: The share of effects repeating an earlier request under a new key that is suspect.
SUSPECT_SHARE = 0.2


@dataclass(frozen=True, slots=True)
class KeyUsage:
    """One route's recent effects: how many, and how many distinct requests."""

    route: str
    effects: int
    distinct_requests: int

    @property
    def repeats(self) -> int:
        return self.effects - self.distinct_requests


@dataclass(frozen=True, slots=True)
class ScopeNote:
    route: str
    detail: str


def suspect_routes(usages: list[KeyUsage], window: timedelta) -> list[ScopeNote]:
    """Routes whose keys look minted per call, with what was seen and what to do."""
    notes = []
    for usage in sorted(usages, key=lambda u: u.route):
        if usage.effects < MIN_EFFECTS or usage.repeats / usage.effects < SUSPECT_SHARE:
            continue
        notes.append(
            ScopeNote(
                usage.route,
                f"route {usage.route}: {usage.repeats} of {usage.effects} effects in the "
                f"last {format_duration(window)} repeat an earlier request under a new "
                "operation key; keys look minted per call, so retries become new "
                "effects. Derive keys from the intent (effect_broker.client."
                "operation_key), or guard the contract with duplicate_payload_window",
            )
        )
    return notes
