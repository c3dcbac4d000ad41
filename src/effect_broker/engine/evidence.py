"""Evidence: what the engine learnt about an effect, before anything is decided.

The dispatcher brings evidence back from the target (an attempt, a probe's answer, a
kit's lookup), ``policy.decide`` reads some off the ledger's row on the database's
clock (a lapsed lease, a spent retry limit, nothing automatic left to try), and an
operator brings a resolution. Each kind is a plain value saying what happened and
nothing about what it means: ``rulings.rule`` alone reads them, so every way into the
engine is judged by the same rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from effect_broker.engine.lookup import KitAnswer
from effect_broker.engine.probe import ProbeResult
from effect_broker.engine.protocol import TargetProtocol
from effect_broker.engine.resolution import ResolutionRequest
from effect_broker.engine.upstream import AttemptResult


@dataclass(frozen=True, slots=True)
class Attempted:
    """One attempt at the target, as the dispatcher saw it go (``upstream.send``).

    ``after_unknown``: an earlier attempt's outcome is unknown, so nothing this one
    proves can make the effect "provably never sent" again. ``protocol``: how the
    route's target answers (an MCP server's), None for plain HTTP.
    """

    attempt: AttemptResult
    after_unknown: bool = False
    protocol: TargetProtocol | None = None


@dataclass(frozen=True, slots=True)
class Probed:
    """A reconcilable target's answer to the lookup by the correlation key."""

    result: ProbeResult


@dataclass(frozen=True, slots=True)
class LookedUp:
    """A transactional target's kit about the effect's current attempt key: the
    lookup's answer, or the tombstone's when the lookup found nothing.
    ``oversized``: the committed answer's body is longer than a receipt holds."""

    answer: KitAnswer
    oversized: bool = False


@dataclass(frozen=True, slots=True)
class Asking:
    """The engine is about to ask the target what happened (a probe, or the kit's
    lookup), holding the effect for ``lease`` meanwhile (one request's worth)."""

    lease: timedelta


@dataclass(frozen=True, slots=True)
class LeaseLapsed:
    """On the database's clock, the holder's lease ran out mid-flight: it died, and
    whatever it sent may have arrived. The taker keeps the effect for ``lease``."""

    lease: timedelta


@dataclass(frozen=True, slots=True)
class RetriesSpent:
    """Every attempt provably took no effect, and the retry limit is spent."""


@dataclass(frozen=True, slots=True)
class PastAutomation:
    """Nothing automatic may settle the effect any more (``policy.decide`` says why)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Resolved:
    """An operator's resolution, with its reason and evidence."""

    request: ResolutionRequest


Evidence = (
    Attempted
    | Probed
    | LookedUp
    | Asking
    | LeaseLapsed
    | RetriesSpent
    | PastAutomation
    | Resolved
)
