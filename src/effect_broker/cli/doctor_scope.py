"""Key scope for ``effect-broker doctor``: keys minted per call, or stuck in place.

A key built from something fresh per call (a new uuid4, the time, a model's whim) makes
every retry a new effect, and the ledger cannot stop the duplicate. The sign in the
ledger: many effects on a route whose canonical request equals an earlier effect's
under another key. A few are normal (two equal orders); a large share is not.

The opposite mistake, one key for everything (an SDK's default headers), leaves a single
effect in the ledger and answers every later, different request 422
``payload-mismatch``, which only the proxy's metrics count. Pure: the counts come from
the ledger and a proxy's ``/metrics``; the judgement is here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from effect_broker.config.durations import format_duration

#: Below this many effects in the window a route says too little to judge.
MIN_EFFECTS = 10
#: The share of effects repeating an earlier request under a new key that is suspect.
SUSPECT_SHARE = 0.2
#: Refused reuses of a key with another payload that say a key is stuck, not mistyped.
MIN_CONFLICTS = 10
_CONFLICTS = re.compile(
    r'^effect_broker_payload_conflicts_total\{route="((?:[^"\\]|\\.)*)"\} (\S+)$',
    re.MULTILINE,
)


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


def payload_conflicts(metrics_text: str) -> dict[str, float]:
    """``effect_broker_payload_conflicts_total`` by route, from a ``/metrics`` page."""
    return {
        route.replace('\\"', '"').replace("\\\\", "\\"): float(value)
        for route, value in _CONFLICTS.findall(metrics_text)
    }


def stuck_routes(
    conflicts: Mapping[str, float], usages: list[KeyUsage]
) -> list[ScopeNote]:
    """Routes where refused key reuses outnumber the effects made: one key, stuck."""
    made = {usage.route: usage.effects for usage in usages}
    notes = []
    for route, refused in sorted(conflicts.items()):
        effects = made.get(route, 0)
        if refused < MIN_CONFLICTS or refused < effects:
            continue
        notes.append(
            ScopeNote(
                route,
                f"route {route}: {refused:.0f} requests reused an operation key with "
                f"another payload (422, nothing sent) against {effects} effects made; "
                "one key looks stuck in place, e.g. in an SDK's default headers. Set "
                "the key per call (effect_broker.client.operation), never on the client",
            )
        )
    return notes
