"""What the kit's operations find and answer: pure values, errors and answers.

Shared by both database drivers and both web frameworks, so that an asyncpg service
and a psycopg one give the proxy, and their own callers, exactly the same answers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from effect_broker.target.protocol import (
    ATTEMPT_KEY_HEADER,
    AttemptReport,
    AttemptState,
    StoredAnswer,
    is_attempt_key,
)

PROBLEM_TYPE_BASE = "https://effect-broker.dev/problems/"
PROBLEM_JSON = "application/problem+json"


class KitError(Exception):
    """Base of the kit's own errors."""


class KitNotInstalled(KitError):
    """The kit's table is missing or not the kit's: the message says how to create it."""


class AttemptTaken(KitError):
    """The attempt key was taken by another commit while this attempt ran.

    Either the proxy's tombstone (it gave this attempt up: the attempt must not commit)
    or a duplicate delivery of the same attempt that committed first. PostgreSQL has
    already aborted the transaction on the unique key, so nothing it did can commit,
    even if this exception were swallowed; after the rollback, ``lookup`` says which.
    """

    def __init__(self, attempt_key: str) -> None:
        super().__init__(f"attempt {attempt_key} was taken by another commit")
        self.attempt_key = attempt_key


class AttemptInProgress(KitError):
    """A tombstone waited its bound for an attempt's uncommitted receipt row.

    The attempt is committing right now (or hangs holding its transaction): neither
    "committed" nor "never will" is proven yet, so the proxy must ask again later.
    """


class MalformedAttemptKey(KitError, ValueError):
    """The request's attempt key is not one the proxy makes."""


@dataclass(frozen=True, slots=True)
class Tombstoned:
    """A tombstone committed under the attempt key first: the attempt must do nothing."""

    at: str


@dataclass(frozen=True, slots=True)
class TombstoneResult:
    """The tombstone's outcome: ``created`` when it committed just now."""

    report: AttemptReport
    created: bool


def read_attempt_key(headers: Mapping[str, str]) -> str | None:
    """The request's ``Effect-Attempt-Key``; None if absent, ``MalformedAttemptKey``
    if it is not a key the proxy makes (``headers`` must be case-insensitive)."""
    key = headers.get(ATTEMPT_KEY_HEADER)
    if key is None:
        return None
    if not is_attempt_key(key):
        raise MalformedAttemptKey(f"{ATTEMPT_KEY_HEADER} is not an attempt key")
    return key


def problem(status: int, slug: str, title: str, detail: str) -> StoredAnswer:
    """An RFC 9457 problem document with a stable ``type`` per cause."""
    document: dict[str, Any] = {
        "type": PROBLEM_TYPE_BASE + slug,
        "title": title,
        "status": status,
        "detail": detail,
    }
    return StoredAnswer(
        status, {"Content-Type": PROBLEM_JSON}, json.dumps(document).encode()
    )


def tombstoned_answer(attempt_key: str) -> StoredAnswer:
    """What a service answers to an attempt the proxy has already given up."""
    return problem(
        409,
        "attempt-tombstoned",
        "The attempt was tombstoned",
        f"attempt {attempt_key} was given up by the proxy before it could commit;"
        " nothing was done",
    )


def in_progress_answer(attempt_key: str) -> StoredAnswer:
    """Neither committed nor tombstoned is proven yet: ask again."""
    return problem(
        503,
        "target-attempt-in-progress",
        "The attempt is in progress",
        f"attempt {attempt_key} is still committing or holding its transaction;"
        " ask again",
    )


def answer_for(report: AttemptReport) -> StoredAnswer:
    """The answer to a request whose attempt key was taken (``AttemptTaken``)."""
    if report.state is AttemptState.COMMITTED and report.answer is not None:
        return report.answer
    if report.state is AttemptState.TOMBSTONED:
        return tombstoned_answer(report.attempt_key)
    return in_progress_answer(report.attempt_key)


def report_from_row(
    attempt_key: str,
    row: tuple[str, int | None, str | None, bytes | None, str] | None,
) -> AttemptReport:
    """An ``AttemptReport`` from ``(state, status, headers json, body, at)`` or no row."""
    if row is None:
        return AttemptReport(attempt_key, AttemptState.ABSENT)
    state, status, headers, body, at = row
    if state == AttemptState.TOMBSTONED:
        return AttemptReport(attempt_key, AttemptState.TOMBSTONED, at)
    if status is None or headers is None or body is None:
        raise ValueError(f"committed attempt {attempt_key} has no stored response")
    answer = StoredAnswer(status, json.loads(headers), bytes(body))
    return AttemptReport(attempt_key, AttemptState.COMMITTED, at, answer)


def prior_from_report(report: AttemptReport) -> StoredAnswer | Tombstoned | None:
    if report.state is AttemptState.COMMITTED:
        return report.answer
    if report.state is AttemptState.TOMBSTONED:
        return Tombstoned(report.at or "")
    return None
