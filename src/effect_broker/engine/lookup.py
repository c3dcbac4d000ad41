"""Ask a transactional target's kit about one attempt, and tombstone it if it is absent.

The kit keeps one row per attempt key: the attempt's receipt (committed in the same
transaction as its mutation) or a tombstone, never both. So after a lost answer the
proxy can settle the attempt for certain: a lookup that finds the receipt gives back
the answer the attempt committed with; otherwise a tombstone under that key either
commits (the attempt can never commit any more: its absence is proven, and only then
may the next attempt, under the next key, go out) or is refused because the attempt's
row is there (its receipt comes back instead).

Everything else proves nothing: an answer that is not exactly the kit's document about
this key (a plain 404 of a server without the kit, an error page, another key), a
status the protocol does not give for that document, a 401 or 503, a timeout. The
effect then stays unknown and nothing is sent. The reading of answers is pure; only
``Kit`` touches the network.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from enum import StrEnum
from http import HTTPStatus

import aiohttp

from effect_broker.engine.messages import StoredResponse
from effect_broker.engine.outcomes import status_after_answer
from effect_broker.engine.upstream import Delivery, send
from effect_broker.headers import Headers, response_headers
from effect_broker.models import Effect, EffectStatus, SafetyClass
from effect_broker.target.protocol import (
    AttemptReport,
    AttemptState,
    attempt_key,
    lookup_path,
    tombstone_path,
)

# What each status of a tombstone answer must say, else the answer proves nothing.
_TOMBSTONE_STATES: dict[int, AttemptState] = {
    HTTPStatus.CREATED: AttemptState.TOMBSTONED,  # this request wrote it
    HTTPStatus.OK: AttemptState.TOMBSTONED,  # one was there already
    HTTPStatus.CONFLICT: AttemptState.COMMITTED,  # refused: the attempt's row is there
}


class Finding(StrEnum):
    COMMITTED = "committed"  # the attempt's receipt is at the target: settle with it
    TOMBSTONED = "tombstoned"  # a tombstone holds the key: the attempt never commits
    ABSENT = "absent"  # neither yet: proves nothing until a tombstone commits
    UNKNOWN = "unknown"  # no proof either way: stay unknown, send nothing


@dataclass(frozen=True, slots=True)
class KitAnswer:
    """What one lookup or tombstone answer proves about one attempt key.

    ``written``: this tombstone request is the one that committed it (201), as opposed
    to one found already there. ``at`` is the target's time of the row, the evidence.
    """

    finding: Finding
    at: str | None = None
    response: StoredResponse | None = None
    written: bool = False
    detail: str = ""
    elapsed: float = 0.0


def current_attempt_key(effect: Effect) -> str:
    """The key of the effect's latest attempt: the one a lost answer belongs to."""
    return attempt_key(effect.downstream_key, effect.attempts)


def status_after_transactional_answer(response: StoredResponse, key: str) -> EffectStatus:
    """The effect's next status given the kit target's answer to attempt ``key``.

    As for every class, 2xx and 4xx are final, except a 409 that is the kit's own
    document about this key: the kit refused the attempt because the key's row is
    there (a tombstone, most likely), which the lookup settles. 408, 429 and 5xx are
    unknown rather than retryable: the lookup proves what happened, so a retry needs
    no guess about what a status means.
    """
    if response.status == HTTPStatus.CONFLICT and _report(response.body, key):
        return EffectStatus.OUTCOME_UNKNOWN
    return status_after_answer(response.status, SafetyClass.TRANSACTIONAL)


def read_lookup(status: int, body: bytes, key: str) -> KitAnswer:
    """What ``GET .../attempts/{key}`` proved: 200 committed or tombstoned, 404 absent."""
    report = _report(body, key)
    if report is None:
        return KitAnswer(
            Finding.UNKNOWN, detail=f"lookup answered {status} without the kit's document"
        )
    expected = {
        AttemptState.COMMITTED: HTTPStatus.OK,
        AttemptState.TOMBSTONED: HTTPStatus.OK,
        AttemptState.ABSENT: HTTPStatus.NOT_FOUND,
    }[report.state]
    if status != expected:
        return KitAnswer(
            Finding.UNKNOWN,
            detail=f"lookup answered {status} for a {report.state} attempt: not the "
            "protocol's answer",
        )
    return _finding(report)


def read_tombstone(status: int, body: bytes, key: str) -> KitAnswer:
    """What ``PUT .../attempts/{key}/tombstone`` proved: 201 tombstoned now, 200
    tombstoned before, 409 refused because the attempt committed."""
    report = _report(body, key)
    if report is None:
        return KitAnswer(
            Finding.UNKNOWN,
            detail=f"tombstone answered {status} without the kit's document",
        )
    if _TOMBSTONE_STATES.get(status) is not report.state:
        return KitAnswer(
            Finding.UNKNOWN,
            detail=f"tombstone answered {status} for a {report.state} attempt: not "
            "the protocol's answer",
        )
    return replace(_finding(report), written=status == HTTPStatus.CREATED)


@dataclass(frozen=True, slots=True)
class Kit:
    """A target kit's endpoints at the upstream's origin, and how to call them: with
    the route's injected headers (its shared secret), within the contract's timeout."""

    session: aiohttp.ClientSession
    origin: str
    headers: Headers
    timeout: timedelta
    max_body: int

    async def look_up(self, key: str) -> KitAnswer:
        return await self._ask("GET", lookup_path(key), key, read_lookup)

    async def tombstone(self, key: str) -> KitAnswer:
        return await self._ask("PUT", tombstone_path(key), key, read_tombstone)

    async def _ask(
        self,
        method: str,
        path: str,
        key: str,
        read: Callable[[int, bytes, str], KitAnswer],
    ) -> KitAnswer:
        attempt = await send(
            self.session,
            method=method,
            url=self.origin + path,
            headers=self.headers,
            body=b"",
            timeout=self.timeout,
            max_body=self.max_body,
        )
        attempt.release()
        if attempt.delivery is not Delivery.ANSWERED or attempt.response is None:
            answer = KitAnswer(Finding.UNKNOWN, detail=attempt.detail)
        elif attempt.overflow is not None:
            answer = KitAnswer(Finding.UNKNOWN, detail="the kit's answer is too large")
        else:
            answer = read(attempt.response.status, attempt.response.body, key)
        return replace(answer, elapsed=attempt.elapsed)


def _report(body: bytes, key: str) -> AttemptReport | None:
    try:
        return AttemptReport.from_json(json.loads(body), expected_key=key)
    except ValueError:  # not JSON, not UTF-8, not the kit's document, bad base64
        return None


def _finding(report: AttemptReport) -> KitAnswer:
    if report.state is AttemptState.COMMITTED:
        assert report.answer is not None  # from_json requires it
        answer = report.answer
        response = StoredResponse(
            status=answer.status,
            reason=_reason(answer.status),
            headers=response_headers(answer.headers.items()),
            body=answer.body,
        )
        return KitAnswer(Finding.COMMITTED, at=report.at, response=response)
    if report.state is AttemptState.TOMBSTONED:
        return KitAnswer(Finding.TOMBSTONED, at=report.at)
    return KitAnswer(Finding.ABSENT)


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""
