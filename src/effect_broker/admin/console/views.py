"""What the console's pages show, built from domain values (pure, no I/O)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from effect_broker.engine.resolution import CONSEQUENCES, Resolution
from effect_broker.models import Attempt, Effect, EffectEvent, EffectStatus

AWAITING = (EffectStatus.OUTCOME_UNKNOWN, EffectStatus.MANUAL_REVIEW)

LABELS: Mapping[Resolution, str] = {
    Resolution.SUCCEEDED: "It happened",
    Resolution.NOT_COMMITTED: "It did not happen: send it again with the same key",
    Resolution.DID_NOT_HAPPEN: "It did not happen (I have proof)",
    Resolution.ABANDONED: "Abandon it: it may have happened",
}


def age(since: datetime, now: datetime) -> str:
    """``3d 4h``, ``12m 5s``: two units are enough to compare at a glance."""
    seconds = max(int((now - since).total_seconds()), 0)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    shown = [f"{n}{unit}" for n, unit in parts if n][:2]
    return " ".join(shown) or "0s"


@dataclass(frozen=True, slots=True)
class RouteCount:
    route: str
    outcome_unknown: int
    manual_review: int
    oldest: str  # the age of the oldest effect waiting on this route


@dataclass(frozen=True, slots=True)
class Row:
    effect_id: str
    short_id: str
    route: str
    status: str
    safety: str
    operation_key: str
    age: str
    created_at: str


@dataclass(frozen=True, slots=True)
class Waiting:
    """The list page: counts per route (as the alerts count) and the effects."""

    counts: list[RouteCount]
    rows: list[Row]
    total: int
    truncated: bool


def waiting_view(
    effects: Sequence[Effect], now: datetime, *, oldest_first: bool, truncated: bool
) -> Waiting:
    by_route: dict[str, dict[str, Any]] = {}
    for effect in effects:
        entry = by_route.setdefault(
            effect.route,
            {"outcome_unknown": 0, "manual_review": 0, "oldest": effect.created_at},
        )
        entry[effect.status.value] += 1
        entry["oldest"] = min(entry["oldest"], effect.created_at)
    counts = [
        RouteCount(
            route,
            entry["outcome_unknown"],
            entry["manual_review"],
            age(entry["oldest"], now),
        )
        for route, entry in sorted(by_route.items())
    ]
    ordered = sorted(effects, key=lambda e: e.created_at, reverse=not oldest_first)
    rows = [
        Row(
            str(e.effect_id),
            str(e.effect_id)[:8],
            e.route,
            e.status.value,
            e.safety.value,
            e.operation_key,
            age(e.created_at, now),
            e.created_at.isoformat(timespec="seconds"),
        )
        for e in ordered
    ]
    return Waiting(counts, rows, len(rows), truncated)


@dataclass(frozen=True, slots=True)
class Choice:
    value: str
    label: str
    consequence: str
    needs_proof: bool


def choices(allowed: Sequence[Resolution]) -> list[Choice]:
    """The resolutions offered, each with what it will do, in the engine's words."""
    return [
        Choice(
            r.value,
            LABELS[r],
            CONSEQUENCES[r],
            r in (Resolution.SUCCEEDED, Resolution.DID_NOT_HAPPEN),
        )
        for r in allowed
    ]


@dataclass(frozen=True, slots=True)
class HistoryLine:
    seq: int
    occurred_at: str
    kind: str
    change: str
    actor: str
    details: str


def history_view(events: Sequence[EffectEvent]) -> list[HistoryLine]:
    return [
        HistoryLine(
            event.seq,
            event.occurred_at.isoformat(timespec="milliseconds"),
            event.kind,
            f"{event.from_status or '(new)'} → {event.to_status}",
            event.actor,
            json.dumps(dict(event.details), indent=2, ensure_ascii=False, default=str)
            if event.details
            else "",
        )
        for event in events
    ]


@dataclass(frozen=True, slots=True)
class AttemptLine:
    attempt_no: int
    owner: str
    started_at: str
    outcomes: list[str] = field(default_factory=list)  # what the history says came back


def attempts_view(
    attempts: Sequence[Attempt], events: Sequence[EffectEvent]
) -> list[AttemptLine]:
    """Each attempt with the events recorded after it started and before the next."""
    lines = []
    for n, attempt in enumerate(attempts):
        until = attempts[n + 1].started_at if n + 1 < len(attempts) else None
        outcomes = [
            _outcome(event)
            for event in events
            if event.occurred_at >= attempt.started_at
            and (until is None or event.occurred_at < until)
            and event.kind != "dispatch"
        ]
        lines.append(
            AttemptLine(
                attempt.attempt_no,
                attempt.owner,
                attempt.started_at.isoformat(timespec="milliseconds"),
                outcomes,
            )
        )
    return lines


def _outcome(event: EffectEvent) -> str:
    """``kind → status``, and what the event recorded about the answer, if anything."""
    head = (
        event.kind
        if event.kind == event.to_status
        else f"{event.kind} → {event.to_status}"
    )
    said = [
        f"{key} {value}"
        for key, value in event.details.items()
        if key in {"reason", "status_code", "cause", "source"} and value is not None
    ]
    return f"{head}: {', '.join(said)}" if said else head
